// The shell around the recipe's state machine: C-client answers and session
// events in, requests and outcomes out. Decisions live in lock_machine.cpp.
#include "lock_attempt.hpp"

#include <unistd.h>

#include <future>
#include <set>
#include <unordered_map>
#include <utility>

#include "zklock/node_data.hpp"
#include "zklock/revocation.hpp"

namespace zklock::detail {
namespace {

using Kind = MachineEvent::Kind;
using Cmd = MachineCommand::Kind;

// Owners with a live attempt per (client, lock): a second request by the same
// owner for the same lock would wait for itself.
std::mutex g_registry_mu;
std::set<std::string> g_registry;

std::string registry_key(const void* impl, const std::string& path, const std::string& owner) {
  return std::to_string(reinterpret_cast<std::uintptr_t>(impl)) + '\n' + path + '\n' + owner;
}

Rc rc_of(const Status& st) {
  if (st.ok()) return Rc::ok;
  if (st.is(Errc::no_node)) return Rc::no_node;
  if (st.is(Errc::node_exists)) return Rc::node_exists;
  if (st.is(Errc::connection_loss) || st.is(Errc::operation_timeout)) return Rc::connection_loss;
  if (st.is(Errc::session_expired) || st.is(Errc::closing)) return Rc::session_expired;
  return Rc::error;
}

MachineEvent answer(Kind kind, std::uint64_t tag, const Status& st) {
  MachineEvent ev{kind};
  ev.tag = tag;
  ev.rc = rc_of(st);
  if (ev.rc == Rc::error) {
    const auto err = st.error("");
    ev.errc = err.code();
    ev.detail = err.what();
  }
  return ev;
}

// Listings are batched per (client, lock path), with at most one in flight:
// a listing needed while one is in flight waits for its answer, and then one
// get_children serves every attempt that enrolled meanwhile (one session's
// requests execute in order, so it lists all their nodes, each issued after
// that attempt's create). An uncontended acquire still costs one round trip.
struct ListingBatch {
  std::mutex mu;
  std::vector<std::pair<std::weak_ptr<LockAttempt>, std::uint64_t>> waiting;  // GUARDED_BY(mu)
  bool inflight = false;                                                       // GUARDED_BY(mu)
};
std::mutex g_batches_mu;
std::unordered_map<std::string, std::shared_ptr<ListingBatch>> g_batches;

std::shared_ptr<ListingBatch> batch_for(const void* impl, const std::string& path) {
  std::lock_guard lk(g_batches_mu);
  auto& b = g_batches[registry_key(impl, path, "")];
  if (!b) b = std::make_shared<ListingBatch>();
  return b;
}

// REQUIRES batch->mu. Its answer sends the next listing for whoever enrolled meanwhile.
void issue_listing(Client::Impl* impl, std::shared_ptr<ListingBatch> batch, std::string path,
                   std::vector<std::pair<std::weak_ptr<LockAttempt>, std::uint64_t>> served) {
  batch->inflight = true;
  impl->get_children(path, nullptr, [impl, path, batch, served = std::move(served)](
                                        Status st, std::vector<std::string> children) {
    {
      std::lock_guard lk(batch->mu);
      batch->inflight = false;
      if (!batch->waiting.empty()) {
        issue_listing(impl, batch, path, std::exchange(batch->waiting, {}));
      } else {
        std::lock_guard lk2(g_batches_mu);
        auto it = g_batches.find(registry_key(impl, path, ""));
        if (it != g_batches.end() && it->second == batch) g_batches.erase(it);
      }
    }
    // Parsed and put in order once for everyone it serves.
    const auto listing = parse_listing(st.ok() ? children : std::vector<std::string>{});
    for (const auto& [weak, tag] : served) {
      auto a = weak.lock();
      if (!a) continue;
      MachineEvent ev = answer(Kind::listed, tag, st);
      ev.listing = listing;
      a->feed(ev);
    }
  });
}

// exists() with a watch; a deletion is fed as `fired` with the request's tag.
// Any other notification (the data changed: a retained node re-taken by its
// owner) re-arms the watch — or, for our own node, goes to the machine
// (own_changed), which decides whether to watch again.
void watch_deletion(Client::Impl* impl, std::weak_ptr<LockAttempt> weak, std::uint64_t tag, Kind answered,
                    Kind fired, std::string path) {
  auto on_event = [impl, weak, tag, answered, fired, path](const WatchEvent& e) {
    auto s = weak.lock();
    if (!s) return;
    if (e.type != WatchEvent::Type::deleted && answered == Kind::own_checked) {
      MachineEvent ev{Kind::own_changed};
      ev.tag = tag;
      s->feed(ev);
      return;
    }
    if (e.type != WatchEvent::Type::deleted) {
      watch_deletion(impl, weak, tag, answered, fired, path);
      return;
    }
    MachineEvent ev{fired};
    ev.tag = tag;
    s->feed(ev);
  };
  impl->exists(path, std::move(on_event), [weak, tag, answered](Status st, const Stat&) {
    if (auto s = weak.lock()) s->feed(answer(answered, tag, st));
  });
}

// The owner a request acts for: its own, else the thread's OwnerScope, else
// the client's default.
std::string owner_for(const Client& client, const AcquireOptions& o) {
  return !o.owner.empty()                  ? o.owner
         : !OwnerScope::current().empty() ? OwnerScope::current()
                                          : client.default_owner();
}

}  // namespace

LockAttempt::LockAttempt(Client& client, AttemptRequest request, Done done)
    : client_(&client), impl_(client.impl().get()), impl_ref_(client.impl()), req_(std::move(request)), done_(std::move(done)) {
  owner_ = owner_for(client, req_.options);
  guid_ = new_guid();
  NodeData d;
  d.owner = owner_;
  d.host = impl_->owner_prefix.substr(0, impl_->owner_prefix.find('/'));
  d.pid = ::getpid();
  d.mode = req_.mode;
  d.priority = req_.options.priority;
  d.description = req_.options.description;
  data_ = encode_node_data(d);  // throws invalid_argument for an over-long owner
}

LockAttempt::~LockAttempt() {
  if (observer_ != 0) impl_->unobserve(observer_);
}

RetainSlot::~RetainSlot() {
  std::shared_ptr<LockAttempt> idle;
  {
    std::lock_guard lk(mu);
    idle = std::move(attempt);
  }
  if (idle) idle->end_retention();
}

void LockAttempt::start(Client& client, AttemptRequest request, Done done) {
  validate_lock_path(request.lock_path);
  if (request.mode != Mode::exclusive) request.retain = std::chrono::milliseconds::zero();
  if (auto slot = request.slot.lock(); slot && request.retain > std::chrono::milliseconds::zero()) {
    std::shared_ptr<LockAttempt> idle;
    {
      std::lock_guard lk(slot->mu);
      idle = std::move(slot->attempt);
    }
    if (idle) {
      if (idle->retake(request, done)) return;
      idle->end_retention();  // another owner (or not idle any more): it queues normally
    }
  }
  auto self = std::make_shared<LockAttempt>(client, std::move(request), std::move(done));
  {
    std::lock_guard lk(g_registry_mu);
    if (!g_registry.insert(registry_key(self->impl_, self->req_.lock_path, self->owner_)).second) {
      throw Error(Errc::would_deadlock, "owner '" + self->owner_ + "' already holds or waits for " +
                                            self->req_.lock_path + " in this process (zklock locks are not re-entrant)");
    }
    self->registered_ = true;
  }
  self->pending_self_ = self;
  std::weak_ptr<LockAttempt> weak = self;
  self->observer_ = self->impl_->observe([weak](SessionEvent ev, std::uint64_t epoch) {
    MachineEvent e{Kind::disconnected};
    switch (ev) {
      case SessionEvent::connected: return;
      case SessionEvent::suspended: e.kind = Kind::disconnected; break;
      case SessionEvent::reconnected: e.kind = Kind::reconnected; break;
      case SessionEvent::lost: e.kind = Kind::expired; break;
      case SessionEvent::validity_expired: e.kind = Kind::validity_expired; break;
    }
    e.epoch = epoch;
    if (auto s = weak.lock()) s->feed(e);
  });
  const auto cancel = [weak](Errc errc, std::string message) {
    auto s = weak.lock();
    if (!s) return;
    MachineEvent e{Kind::cancel};
    e.errc = errc;
    e.detail = std::move(message);
    s->feed(e);
  };
  if (self->req_.timeout > std::chrono::milliseconds::zero()) {
    self->timer_ = self->impl_->schedule_at(Clock::now() + self->req_.timeout, [cancel, path = self->req_.lock_path] {
      cancel(Errc::timeout, "timed out waiting for " + path);
    });
  }
  if (self->req_.stop.stop_possible()) {
    // May run inline right here if already requested: the machine is not
    // started yet, and the cancel is applied once it is (see feed).
    self->stop_cb_ = std::make_unique<std::stop_callback<std::function<void()>>>(
        self->req_.stop, std::function<void()>([cancel, path = self->req_.lock_path] {
          cancel(Errc::cancelled, "acquisition of " + path + " cancelled");
        }));
  }
  self->begin();
}

AcquireResult LockAttempt::run_blocking(Client& client, AttemptRequest request) {
  if (Client::Impl::in_callback()) {
    throw Error(Errc::invalid_state, "blocking acquire cannot run inside a zklock callback");
  }
  auto promise = std::make_shared<std::promise<AcquireResult>>();
  auto future = promise->get_future();
  start(client, std::move(request), [promise](AcquireResult r) { promise->set_value(std::move(r)); });
  return future.get();
}

// First the ensemble id (cached per session), then the machine. With the id
// cached the create goes out from the caller's thread (no hop).
void LockAttempt::begin() {
  auto self = shared_from_this();
  auto with_id = [self](Status st, const std::string& id) {
    self->locked([&] {
      if (!self->done_) return;  // cancelled before the machine started
      if (!st.ok()) {
        self->deliver_locked(st.error("reading the ensemble id"));
        return;
      }
      self->ensemble_id_ = id;
      self->epoch_ = self->impl_->epoch();
      self->machine_.emplace(MachineConfig{self->req_.mode, self->guid_, self->req_.policy, self->epoch_,
                                           self->req_.lock_path,
                                           self->req_.retain > std::chrono::milliseconds::zero()});
      self->execute_locked(self->machine_->start());
    });
  };
  if (auto cached = impl_->cached_ensemble_id(); !cached.empty()) {
    with_id(Status{}, cached);
  } else {
    impl_->ensemble_id_async(std::move(with_id));
  }
}

// Runs `fn` under mu_, then what it queued in outbox_, unlocked: user
// callbacks, and anything that may drop the last Lease (whose destructor
// releases, taking mu_).
template <class Fn>
void LockAttempt::locked(Fn fn) {
  std::vector<std::function<void()>> after;
  {
    std::lock_guard lk(mu_);
    fn();
    after.swap(outbox_);
  }
  for (auto& f : after) f();
}

void LockAttempt::feed(const MachineEvent& ev) {
  locked([&] {
    if (machine_) {
      execute_locked(machine_->step(ev));
    } else if (ev.kind == Kind::cancel && done_) {  // before the ensemble id arrived: nothing was sent
      deliver_locked(Error(ev.errc, ev.detail));
    }
  });
}

// REQUIRES mu_. The acquisition's outcome when it is an error.
void LockAttempt::deliver_locked(Error error) {
  finish_locked();
  impl_->defer([keep = std::move(pending_self_)] {});  // outlive whoever called us
  if (auto done = std::exchange(done_, nullptr)) {
    outbox_.push_back([done = std::move(done), error = std::move(error)] { done(AcquireResult{Lease(), error}); });
  }
}

void LockAttempt::execute_locked(LockMachine::Commands cmds) {
  for (const auto& c : cmds) {
    if (c.kind >= Cmd::granted) report_locked(c);
    else send_locked(c);
  }
  // Invariant (3): once released or failed, nobody need hold the attempt
  // (release_async's caller drops its Lease at once), yet the remove in
  // flight must still be answered, retried after a reconnect, and reported.
  const auto phase = machine_->phase();
  const bool over = phase == LockMachine::Phase::failed || phase == LockMachine::Phase::released ||
                    phase == LockMachine::Phase::releasing || phase == LockMachine::Phase::ending;
  if (over && !machine_->finished()) keep_alive_while_cleaning();
}

void LockAttempt::send_locked(const MachineCommand& c) {
  std::weak_ptr<LockAttempt> weak = weak_from_this();
  const auto tag = c.tag;
  auto feed_to = [weak](MachineEvent ev) {
    if (auto s = weak.lock()) s->feed(ev);
  };
  if (impl_->epoch() != epoch_) {  // invariant (2): never on another session
    impl_->defer([feed_to, tag] {
      MachineEvent ev{Kind::removed};  // any answer saying "session over" ends the attempt
      ev.tag = tag;
      ev.rc = Rc::session_expired;
      feed_to(ev);
    });
    return;
  }
  switch (c.kind) {
    case Cmd::create:
      impl_->create(child_path(lock_node_prefix(req_.mode, owner_key(owner_), c.name)), data_,
                    CreateMode::ephemeral_sequential,
                    [feed_to, tag](Status st, const std::string& path, const Stat& stat) {
                      MachineEvent ev = answer(Kind::created, tag, st);
                      if (st.ok()) {
                        ev.name = split_path(path).second;
                        ev.czxid = stat.czxid;
                      }
                      feed_to(ev);
                    });
      break;
    case Cmd::make_parents: {
      // Containers, top-down and pipelined; "already exists" is fine.
      std::vector<std::string> prefixes;
      for (std::size_t pos = 1; (pos = req_.lock_path.find('/', pos)) != std::string::npos; ++pos) {
        prefixes.push_back(req_.lock_path.substr(0, pos));
      }
      prefixes.push_back(req_.lock_path);
      auto remaining = std::make_shared<std::size_t>(prefixes.size());
      auto worst = std::make_shared<Status>();
      for (const auto& p : prefixes) {
        impl_->create(p, "", CreateMode::container, [feed_to, tag, remaining, worst](Status st, const std::string&, const Stat&) {
          if (!st.ok() && !st.is(Errc::node_exists)) *worst = st;
          if (--*remaining == 0) feed_to(answer(Kind::parents_made, tag, *worst));
        });
      }
      break;
    }
    case Cmd::list:
      list_locked(tag);
      break;
    case Cmd::list_watch:  // never batched: the children watch is this attempt's
      impl_->get_children(
          req_.lock_path,
          [feed_to, tag](const WatchEvent&) {
            MachineEvent ev{Kind::children_changed};
            ev.tag = tag;
            feed_to(ev);
          },
          [feed_to, tag](Status st, std::vector<std::string> children) {
            MachineEvent ev = answer(Kind::listed, tag, st);
            if (st.ok()) ev.children = std::move(children);
            feed_to(ev);
          });
      break;
    case Cmd::touch:  // the node data unchanged, at the expected version
      impl_->set_data(child_path(c.name), data_, c.version, [feed_to, tag](Status st, const Stat& stat) {
        MachineEvent ev = answer(Kind::touched, tag, st);
        if (st.ok()) {
          ev.mzxid = stat.mzxid;
          ev.version = stat.version;
        }
        feed_to(ev);
      });
      break;
    case Cmd::read_stats: {
      auto stats = std::make_shared<std::vector<NodeStat>>(c.names.size());
      auto remaining = std::make_shared<std::size_t>(c.names.size());
      for (std::size_t i = 0; i < c.names.size(); ++i) {
        impl_->exists(child_path(c.names[i]), nullptr, [feed_to, tag, stats, remaining, i](Status st, const Stat& s) {
          (*stats)[i] = NodeStat{rc_of(st), st.ok() ? s.czxid : 0};
          if (--*remaining > 0) return;
          MachineEvent ev{Kind::stats_read};
          ev.tag = tag;
          ev.stats = std::move(*stats);
          feed_to(ev);
        });
      }
      break;
    }
    case Cmd::watch_blocker:
      watch_deletion(impl_, weak, tag, Kind::blocker_checked, Kind::blocker_deleted, child_path(c.name));
      break;
    case Cmd::watch_own:
      watch_deletion(impl_, weak, tag, Kind::own_checked, Kind::own_deleted, child_path(c.name));
      break;
    case Cmd::read_marker:
    case Cmd::read_record: {
      const bool marker = c.kind == Cmd::read_marker;
      impl_->get(marker ? req_.lock_path : revocation_record_path(c.name), nullptr,
                 [feed_to, tag, marker](Status st, std::string data, const Stat&) {
                   MachineEvent ev = answer(marker ? Kind::marker_read : Kind::record_read, tag, st);
                   ev.data = std::move(data);
                   feed_to(ev);
                 });
      break;
    }
    case Cmd::remove:
    case Cmd::remove_extra:
      if (c.with_marker) {
        // Invariant (3) of the machine: the marker in the same transaction.
        impl_->multi({Op::remove(child_path(c.name)), Op::set_data(req_.lock_path, c.name)},
                     [feed_to, tag](Status st, std::vector<OpResult>) { feed_to(answer(Kind::removed, tag, st)); });
      } else {
        impl_->remove(child_path(c.name), -1, [feed_to, tag](Status st) { feed_to(answer(Kind::removed, tag, st)); });
      }
      break;
    default:
      break;
  }
}

// A listing issued after every request this attempt has sent so far.
void LockAttempt::list_locked(std::uint64_t tag) {
  auto batch = batch_for(impl_, req_.lock_path);
  std::lock_guard lk(batch->mu);
  if (!batch->inflight) {
    issue_listing(impl_, batch, req_.lock_path, {{weak_from_this(), tag}});
  } else {
    batch->waiting.emplace_back(weak_from_this(), tag);
  }
}

void LockAttempt::report_locked(const MachineCommand& c) {
  switch (c.kind) {
    case Cmd::granted: {
      node_path_ = child_path(machine_->node_name());
      const auto parsed = parse_lock_node_name(machine_->node_name());
      token_ = FencingToken(ensemble_id_, c.czxid, parsed ? parsed->sequence : 0);
      ++grant_;
      fallback_.reset();
      if (grant_ > 1) lost_source_ = std::stop_source();  // a re-take: the earlier lease's token stays quiet
      if (timer_ != 0) impl_->cancel(timer_);
      timer_ = 0;
      if (auto done = std::exchange(done_, nullptr)) {
        outbox_.push_back([done = std::move(done), self = std::move(pending_self_)] {
          done(AcquireResult{Lease(self), std::nullopt});
        });
      }
      break;
    }
    case Cmd::failed:
      deliver_locked(Error(c.errc, c.message));
      break;
    case Cmd::lost: {
      loss_ = c.reason;
      loss_detail_ = c.message;
      impl_->log->warn("lease on {} ({}) lost: {} — {}", req_.lock_path, token_.str(), loss_reason_name(c.reason),
                       c.message);
      auto cbs = std::exchange(lost_cbs_, {});
      impl_->post_user([src = lost_source_, cbs = std::move(cbs), reason = c.reason, detail = c.message]() mutable {
        src.request_stop();
        for (auto& cb : cbs) cb(reason, detail);
      });
      break;
    }
    case Cmd::released:
      for (auto& then : std::exchange(release_waiters_, {})) outbox_.push_back(std::move(then));
      break;
    case Cmd::retake_void: {
      // Queue anew: the machine's remove went out first, so a waiter the
      // re-take's listing found is ahead of our new node.
      finish_locked();
      impl_->defer([keep = std::move(pending_self_)] {});
      auto done = std::exchange(done_, nullptr);
      auto fallback = std::exchange(fallback_, std::nullopt);
      impl_->log->debug("re-take of {} void: {}", req_.lock_path, c.message);
      if (done && fallback) {
        outbox_.push_back([client = client_, done = std::move(done), fallback = std::move(*fallback)]() mutable {
          try {
            LockAttempt::start(*client, std::move(fallback), done);
          } catch (const Error& e) {
            done(AcquireResult{Lease(), e});
          } catch (const std::exception& e) {
            done(AcquireResult{Lease(), Error(Errc::system_error, e.what())});
          }
        });
      }
      break;
    }
    case Cmd::notice:
      impl_->log->warn("{}", c.message);
      break;
    default:
      break;
  }
}

// REQUIRES mu_. Nobody may hold a failed or released attempt any more, yet
// it must outlive its cleanup (a create's answer, a delete retried after a
// reconnect). The timer thread holds it — not a self-reference, which would
// outlive the client — re-armed while cleanup is pending.
void LockAttempt::keep_alive_while_cleaning() {
  if (keeping_alive_) return;
  keeping_alive_ = true;
  impl_->schedule_at(Clock::now() + std::max(impl_->negotiated(), std::chrono::milliseconds(100)),
                     [self = shared_from_this()] {
                       std::lock_guard lk(self->mu_);
                       self->keeping_alive_ = false;
                       if (!self->machine_->finished()) self->keep_alive_while_cleaning();
                     });
}

void LockAttempt::finish_locked() {
  if (timer_ != 0) impl_->cancel(timer_);
  timer_ = 0;
  if (registered_) {
    std::lock_guard lk(g_registry_mu);
    g_registry.erase(registry_key(impl_, req_.lock_path, owner_));
    registered_ = false;
  }
}

// `then` runs once the node is gone (on the thread that learns it). False,
// and `then` dropped, when the lease was already released.
bool LockAttempt::start_release(std::uint64_t grant, std::function<void()> then) {
  bool started = false;
  locked([&] {
    if (!machine_ || machine_->phase() != LockMachine::Phase::held || grant != grant_) return;
    started = true;
    finish_locked();
    release_waiters_.push_back(std::move(then));
    execute_locked(machine_->step(MachineEvent{Kind::release}));
    if (machine_->phase() == LockMachine::Phase::retained) retain_locked();
  });
  return started;
}

// REQUIRES mu_. The node stays idle: the retain timer ends the retention
// unless a re-take comes first; the slot keeps the attempt alive (the slot's
// lock is taken inside ours here, never the other way round).
void LockAttempt::retain_locked() {
  std::weak_ptr<LockAttempt> weak = weak_from_this();
  retain_timer_ = impl_->schedule_at(Clock::now() + req_.retain, [weak] {
    if (auto s = weak.lock()) s->feed(MachineEvent{Kind::retain_over});
  });
  auto slot = req_.slot.lock();
  if (!slot) {  // the mutex is gone: nobody can re-take
    execute_locked(machine_->step(MachineEvent{Kind::retain_over}));
    return;
  }
  std::shared_ptr<LockAttempt> displaced;
  {
    std::lock_guard lk(slot->mu);
    displaced = std::exchange(slot->attempt, shared_from_this());
  }
  if (displaced) outbox_.push_back([displaced] { displaced->end_retention(); });
}

bool LockAttempt::retake(AttemptRequest& fallback, Done& done) {
  bool taken = false;
  locked([&] {
    if (!machine_ || machine_->phase() != LockMachine::Phase::retained) return;
    const auto& o = fallback.options;
    const std::string owner = owner_for(*client_, o);
    if (owner != owner_ || o.priority != req_.options.priority || o.description != req_.options.description ||
        fallback.policy != req_.policy) {
      return;  // the node's data says who holds it and how: only the same holder re-takes
    }
    {
      std::lock_guard lk(g_registry_mu);
      if (!g_registry.insert(registry_key(impl_, req_.lock_path, owner_)).second) return;
      registered_ = true;
    }
    taken = true;
    if (retain_timer_ != 0) impl_->cancel(retain_timer_);
    retain_timer_ = 0;
    done_ = std::move(done);
    fallback_ = std::move(fallback);
    pending_self_ = shared_from_this();
    execute_locked(machine_->step(MachineEvent{Kind::retake}));
  });
  return taken;
}

void LockAttempt::end_retention() {
  locked([&] {
    if (retain_timer_ != 0) impl_->cancel(retain_timer_);
    retain_timer_ = 0;
    if (machine_) execute_locked(machine_->step(MachineEvent{Kind::retain_over}));
  });
}

std::pair<std::uint64_t, FencingToken> LockAttempt::current_grant() const {
  std::lock_guard lk(mu_);
  return {grant_, token_};
}

std::stop_token LockAttempt::lost_token(std::uint64_t grant) const {
  std::lock_guard lk(mu_);
  return grant == grant_ ? lost_source_.get_token() : std::stop_token();
}

void LockAttempt::release(std::uint64_t grant) noexcept {
  try {
    auto promise = std::make_shared<std::promise<void>>();
    auto future = promise->get_future();
    if (!start_release(grant, [promise] { promise->set_value(); })) return;
    if (Client::Impl::in_callback()) return;  // never block ZooKeeper's thread
    future.wait_for(impl_->negotiated() + std::chrono::seconds(2));
  } catch (const std::exception& e) {
    impl_->log->error("releasing {}: {}", req_.lock_path, e.what());
  } catch (...) {
    impl_->log->error("releasing {}: unknown exception", req_.lock_path);
  }
}

void LockAttempt::release_async(std::uint64_t grant, std::function<void()> done) noexcept {
  try {
    auto post = [impl = impl_ref_, done = std::move(done)] {
      if (done) impl->post_user(done);
    };
    if (!start_release(grant, post)) post();
  } catch (const std::exception& e) {
    impl_->log->error("releasing {}: {}", req_.lock_path, e.what());
  } catch (...) {
    impl_->log->error("releasing {}: unknown exception", req_.lock_path);
  }
}

bool LockAttempt::valid(std::uint64_t grant) const {
  std::lock_guard lk(mu_);
  return grant == grant_ && machine_ && machine_->holding() && impl_->epoch() == epoch_ && Clock::now() < impl_->valid_until();
}

bool LockAttempt::suspended(std::uint64_t grant) const {
  std::lock_guard lk(mu_);
  return grant == grant_ && machine_ && machine_->phase() == LockMachine::Phase::held && !loss_ && machine_->suspended();
}

std::optional<LossReason> LockAttempt::loss_reason(std::uint64_t grant) const {
  std::lock_guard lk(mu_);
  return grant == grant_ ? loss_ : std::nullopt;  // an earlier grant was released cleanly
}

std::string LockAttempt::loss_detail(std::uint64_t grant) const {
  std::lock_guard lk(mu_);
  return grant == grant_ ? loss_detail_ : std::string();
}

void LockAttempt::on_lost(std::uint64_t grant, std::function<void(LossReason, const std::string&)> cb) {
  std::lock_guard lk(mu_);
  if (grant != grant_) return;  // released: never lost
  if (loss_) {
    impl_->post_user([cb = std::move(cb), r = *loss_, d = loss_detail_] { cb(r, d); });
    return;
  }
  lost_cbs_.push_back(std::move(cb));
}

Lease take_lease(AcquireResult result) {
  if (result.error) throw std::move(*result.error);
  return std::move(result.lease);
}

std::optional<Lease> take_lease_unless_timeout(AcquireResult result) {
  if (result.error && result.error->code() == Errc::timeout) return std::nullopt;
  return take_lease(std::move(result));
}

void start_async(Client& client, AttemptRequest request, AcquireCallback done) {
  auto impl = client.impl();
  LockAttempt::start(client, std::move(request), [impl, done = std::move(done)](AcquireResult r) mutable {
    auto shared = std::make_shared<AcquireResult>(std::move(r));
    impl->post_user([done, shared]() mutable { done(std::move(*shared)); });
  });
}

}  // namespace zklock::detail
