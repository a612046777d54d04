// The recipe: create → list → (granted | watch the blocker) → hand-off.
// docs/design.md explains why each step is sound; comments here say which
// invariant a step relies on.
#include "lock_attempt.hpp"

#include <unistd.h>

#include <algorithm>
#include <future>
#include <set>
#include <unordered_set>
#include <utility>

#include "zklock/node_data.hpp"
#include "zklock/revocation.hpp"

namespace zklock::detail {
namespace {

// Owners with a live attempt per (client, lock): a second request by the same
// owner for the same lock would wait for itself.
std::mutex g_registry_mu;
std::set<std::string> g_registry;

std::string registry_key(const void* impl, const std::string& path, const std::string& owner) {
  return std::to_string(reinterpret_cast<std::uintptr_t>(impl)) + '\n' + path + '\n' + owner;
}

// Foreign children are logged once per name per process (bounded).
void log_foreign_once(spdlog::logger& log, const std::string& lock_path, const std::string& name) {
  static std::mutex mu;
  static std::unordered_set<std::string> seen;
  std::lock_guard lk(mu);
  if (seen.size() > 10000 || !seen.insert(lock_path + "/" + name).second) return;
  log.warn("ignoring child '{}' of lock {}: not a zklock node (docs/protocol.md)", name, lock_path);
}

bool transient(const Status& st) {
  return st.is(Errc::connection_loss) || st.is(Errc::operation_timeout);
}

std::string hostname_of(const std::string& prefix) {
  const auto slash = prefix.find('/');
  return prefix.substr(0, slash);
}

// Queue order: wrap-aware sequence, ties (a saturated counter) by czxid.
bool queue_less(const QueueEntry& a, const QueueEntry& b) {
  const int c = compare_sequence(a.name.sequence, b.name.sequence);
  if (c != 0) return c < 0;
  return a.czxid < b.czxid;
}

constexpr const char* kRevocations = "/zklock/revocations/";

}  // namespace



LockAttempt::LockAttempt(Client& client, AttemptRequest request, Done done)
    : impl_(client.impl().get()), impl_ref_(client.impl()), req_(std::move(request)), done_(std::move(done)) {
  owner_ = !req_.options.owner.empty() ? req_.options.owner
           : !OwnerScope::current().empty() ? OwnerScope::current()
                                             : client.default_owner();
  guid_ = new_guid();
  node_prefix_ = req_.lock_path + "/" + lock_node_prefix(req_.mode, owner_key(owner_), guid_);
  NodeData d;
  d.owner = owner_;
  d.host = hostname_of(impl_->owner_prefix);
  d.pid = ::getpid();
  d.mode = req_.mode;
  d.priority = req_.options.priority;
  d.description = req_.options.description;
  data_ = encode_node_data(d);  // throws invalid_argument for an over-long owner
}

LockAttempt::~LockAttempt() {
  if (observer_ != 0) impl_->unobserve(observer_);
}

void LockAttempt::start(Client& client, AttemptRequest request, Done done) {
  validate_lock_path(request.lock_path);
  auto self = std::make_shared<LockAttempt>(client, std::move(request), std::move(done));
  {
    std::lock_guard lk(g_registry_mu);
    if (!g_registry.insert(registry_key(self->impl_, self->req_.lock_path, self->owner_)).second) {
      throw Error(Errc::would_deadlock, "owner '" + self->owner_ + "' already holds or waits for " +
                                            self->req_.lock_path +
                                            " in this process (zklock locks are not re-entrant)");
    }
    self->registered_ = true;
  }
  self->pending_self_ = self;
  std::weak_ptr<LockAttempt> weak = self;
  self->observer_ = self->impl_->observe([weak](SessionEvent ev, std::uint64_t epoch) {
    if (auto s = weak.lock()) s->on_session(ev, epoch);
  });
  if (self->req_.timeout > std::chrono::milliseconds::zero()) {
    self->timer_ = self->impl_->schedule_at(Clock::now() + self->req_.timeout, [self] {
      self->abandon(Errc::timeout, "timed out waiting for " + self->req_.lock_path);
    });
  }
  if (self->req_.stop.stop_possible()) {
    // May run inline right here if already requested; abandon() takes mu_.
    self->stop_cb_ = std::make_unique<std::stop_callback<std::function<void()>>>(
        self->req_.stop, std::function<void()>([weak] {
          if (auto s = weak.lock()) s->abandon(Errc::cancelled, "acquisition of " + s->req_.lock_path + " cancelled");
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

// First the ensemble id (cached per session), then the node. With the id
// cached the create goes out from the caller's thread (no hop); start() holds
// no lock here, so taking mu_ inline is safe.
void LockAttempt::begin() {
  auto self = shared_from_this();
  auto with_id = [self](Status st, const std::string& id) {
    std::lock_guard lk(self->mu_);
    if (self->phase_ != Phase::starting) return;
    if (!st.ok()) {
      self->fail(st.error("reading /zklock/ensemble-id"));
      return;
    }
    self->ensemble_id_ = id;
    self->phase_ = Phase::creating;
    self->create_and_list();
  };
  if (auto cached = impl_->cached_ensemble_id(); !cached.empty()) {
    with_id(Status{}, cached);
  } else {
    impl_->ensemble_id_async(std::move(with_id));
  }
}


// Listings are batched per (client, lock path), with at most one in flight:
// creates go out at once; an attempt that needs a listing while one is in
// flight enrolls, and when that answer arrives one get_children goes out for
// everyone enrolled meanwhile (one session's requests execute in order, so
// it lists all their nodes). It is parsed and ordered once. An uncontended
// acquire still costs one round trip (no listing in flight: it goes out
// behind the create); a burst of N local waiters costs about one listing per
// round trip of the burst instead of N, each of O(N) bytes.
struct ListingBatch {
  std::mutex mu;
  std::vector<std::pair<std::weak_ptr<LockAttempt>, std::uint64_t>> waiting;  // GUARDED_BY(mu)
  bool inflight = false;  // a listing is sent and not yet answered             GUARDED_BY(mu)
};

namespace {
std::mutex g_batches_mu;
std::unordered_map<std::string, std::shared_ptr<ListingBatch>> g_batches;

std::shared_ptr<ListingBatch> batch_for(const void* impl, const std::string& path) {
  std::lock_guard lk(g_batches_mu);
  auto& b = g_batches[registry_key(impl, path, "")];
  if (!b) b = std::make_shared<ListingBatch>();
  return b;
}

void forget_batch(const void* impl, const std::string& path, const std::shared_ptr<ListingBatch>& b) {
  std::lock_guard lk(g_batches_mu);
  auto it = g_batches.find(registry_key(impl, path, ""));
  if (it != g_batches.end() && it->second == b) g_batches.erase(it);
}

std::shared_ptr<const Listing> parse_listing(Status st, std::vector<std::string> children, spdlog::logger& log,
                                             const std::string& lock_path) {
  auto l = std::make_shared<Listing>();
  l->status = st;
  if (!st.ok()) return l;
  l->queue.reserve(children.size());
  for (auto& c : children) {
    auto parsed = parse_lock_node_name(c);
    if (!parsed) {
      log_foreign_once(log, lock_path, c);
      continue;
    }
    l->queue.push_back(QueueEntry{std::move(*parsed), 0});
  }
  std::sort(l->queue.begin(), l->queue.end(), [](const QueueEntry& a, const QueueEntry& b) {
    return compare_sequence(a.name.sequence, b.name.sequence) < 0;
  });
  l->by_guid.reserve(l->queue.size());
  for (std::size_t i = 0; i < l->queue.size(); ++i) {
    l->by_guid.emplace(l->queue[i].name.guid, i);
    if (i > 0 && l->queue[i - 1].name.sequence == l->queue[i].name.sequence) l->has_ties = true;
  }
  return l;
}
}  // namespace

// REQUIRES batch->mu. One get_children serving every attempt in `waiting`;
// its answer sends the next one for whoever enrolled meanwhile.
void LockAttempt::issue_listing(Client::Impl* impl, std::shared_ptr<ListingBatch> batch, std::string path,
                                std::vector<std::pair<std::weak_ptr<LockAttempt>, std::uint64_t>> waiting) {
  batch->inflight = true;
  auto served = std::make_shared<decltype(waiting)>(std::move(waiting));
  impl->get_children(path, nullptr, [impl, path, batch, served](Status st, std::vector<std::string> children) {
    {
      std::lock_guard lk(batch->mu);
      batch->inflight = false;
      if (!batch->waiting.empty()) {
        // Sent before this answer is handed out: an attempt that lists
        // again in on_listing enrolls behind it and waits one round trip.
        issue_listing(impl, batch, path, std::exchange(batch->waiting, {}));
      } else {
        forget_batch(impl, path, batch);
      }
    }
    auto listing = parse_listing(st, std::move(children), *impl->log, path);
    for (auto& [weak, gen] : *served) {
      if (auto a = weak.lock()) a->on_listing(listing, gen);
    }
  });
}

// REQUIRES mu_. Gets a listing issued after our create (if any): at once,
// right behind the create, when none of this lock is in flight (the
// uncontended path: no thread hop); otherwise with the next batch.
void LockAttempt::list_soon(bool with_create) {
  auto batch = batch_for(impl_, req_.lock_path);
  std::lock_guard lk(batch->mu);
  const auto gen = generation_;
  if (with_create) {
    // Issued under batch->mu, so it precedes the batch's listing in session order.
    auto self = shared_from_this();
    impl_->create(node_prefix_, data_, CreateMode::ephemeral_sequential,
                  [self, gen](Status st, const std::string& path, const Stat& stat) {
                    self->on_created(st, path, stat, gen);
                  });
  }
  if (!batch->inflight) {
    issue_listing(impl_, batch, req_.lock_path, {{weak_from_this(), gen}});
  } else {
    batch->waiting.emplace_back(weak_from_this(), gen);
  }
}

// REQUIRES mu_. The create and the listing go out back to back, without
// waiting for the create's answer: the listing already contains our node,
// found by its GUID, so an uncontended acquire costs one round trip.
void LockAttempt::create_and_list() {
  ++generation_;
  create_uncertain_ = true;
  list_soon(true);
}

// REQUIRES mu_. Creates the lock path and its missing ancestors as containers
// (pipelined, top-down; "already exists" is fine), then retries the create.
void LockAttempt::ensure_parent_then_create() {
  if (++parent_retries_ > 20) {
    fail(Error(Errc::no_node, "cannot create lock path " + req_.lock_path + " (it keeps disappearing)"));
    return;
  }
  std::vector<std::string> prefixes;
  for (std::size_t pos = 1; (pos = req_.lock_path.find('/', pos)) != std::string::npos; ++pos) {
    prefixes.push_back(req_.lock_path.substr(0, pos));
  }
  prefixes.push_back(req_.lock_path);
  auto self = shared_from_this();
  auto remaining = std::make_shared<std::size_t>(prefixes.size());
  auto worst = std::make_shared<Status>();
  for (const auto& p : prefixes) {
    impl_->create(p, "", CreateMode::container, [self, remaining, worst](Status st, const std::string&, const Stat&) {
      std::lock_guard lk(self->mu_);
      if (!st.ok() && !st.is(Errc::node_exists)) *worst = st;
      if (--*remaining > 0 || self->phase_ != Phase::creating) return;
      if (worst->ok() || transient(*worst)) {
        self->create_and_list();
      } else {
        self->fail(worst->error("creating lock path " + self->req_.lock_path));
      }
    });
  }
}

void LockAttempt::on_created(Status st, const std::string& path, const Stat& stat, std::uint64_t gen) {
  std::lock_guard lk(mu_);
  if (gen != generation_) return;
  if (st.ok()) {
    create_uncertain_ = false;
    node_exists_ = true;
    node_path_ = path;
    node_name_ = split_path(path).second;
    epoch_ = Client::Impl::callback_epoch();
    const auto parsed = parse_lock_node_name(node_name_);
    token_ = FencingToken(ensemble_id_, stat.czxid, parsed ? parsed->sequence : 0);
    if (phase_ == Phase::failed) {  // abandoned while the create was in flight
      delete_own_node(false, nullptr);
      return;
    }
    watch_own_node();
    return;
  }
  if (phase_ == Phase::failed) {
    // Abandoned while the create was in flight. A lost answer means the
    // create may have run: the node is found by GUID and deleted once the
    // same session is back, or it would block the queue while we live.
    if (!transient(st)) {
      create_uncertain_ = false;
    } else {
      keep_alive_while_cleaning();
      if (impl_->connected()) sweep_uncertain_create();
    }
    return;
  }
  if (st.is(Errc::no_node)) {  // the lock path is missing, or an emptied container was reaped
    create_uncertain_ = false;
    ++generation_;  // the listing behind this create is void
    ensure_parent_then_create();
  } else if (transient(st)) {
    // The create may have run. resync() finds it by GUID once reconnected.
    ++generation_;
    if (impl_->connected()) resync();
  } else {
    create_uncertain_ = false;
    fail(st.error("creating lock node under " + req_.lock_path));
  }
}


void LockAttempt::on_listing(std::shared_ptr<const Listing> listing, std::uint64_t gen) {
  std::lock_guard lk(mu_);
  if (gen != generation_ || (phase_ != Phase::creating && phase_ != Phase::waiting)) return;
  const Status st = listing->status;
  if (!st.ok()) {
    if (transient(st)) {
      if (impl_->connected()) resync();
      return;
    }
    fail(st.error("listing " + req_.lock_path));
    return;
  }
  const auto it = listing->by_guid.find(guid_);
  if (it == listing->by_guid.end()) {
    if (node_exists_) {
      own_node_gone_locked();  // listed after our create, yet absent: deleted by someone
    } else if (create_uncertain_) {
      create_uncertain_ = false;
      create_and_list();  // it never ran; create again
    }
    return;
  }
  if (!node_exists_) {  // a create whose answer was lost: adopt the node found by GUID
    node_exists_ = true;
    create_uncertain_ = false;
    node_name_ = listing->queue[it->second].name.name;
    node_path_ = req_.lock_path + "/" + node_name_;
    epoch_ = Client::Impl::callback_epoch();
  }
  if (token_.czxid() == 0) {
    // Adopted node: its czxid (the token) comes from one exists.
    auto self = shared_from_this();
    impl_->exists(node_path_, nullptr, [self, listing](Status st2, const Stat& s) {
      std::lock_guard lk2(self->mu_);
      if (!st2.ok()) {
        if (st2.is(Errc::no_node)) self->own_node_gone_locked();
        else if (!transient(st2)) self->fail(st2.error("reading " + self->node_path_));
        return;
      }
      const auto parsed = parse_lock_node_name(self->node_name_);
      self->token_ = FencingToken(self->ensemble_id_, s.czxid, parsed ? parsed->sequence : 0);
      self->watch_own_node();
      self->order_then_evaluate(listing);
    });
    return;
  }
  order_then_evaluate(listing);
}

// REQUIRES mu_. Sequence numbers tie only when the server's counter has
// saturated (ZooKeeper 3.8.0 stops at 2147483647). Tied nodes are ordered by
// czxid, read with one exists per tied node; nodes that vanished meanwhile
// are dropped. Without ties the shared listing is used as it is.
void LockAttempt::order_then_evaluate(std::shared_ptr<const Listing> listing) {
  if (!listing->has_ties) {
    evaluate(listing);
    return;
  }
  auto copy = std::make_shared<Listing>(*listing);
  std::vector<std::size_t> need;
  for (std::size_t i = 0; i < copy->queue.size(); ++i) {
    auto& e = copy->queue[i];
    if (e.name.guid == guid_) {
      e.czxid = token_.czxid();
      continue;
    }
    const bool tied = (i > 0 && copy->queue[i - 1].name.sequence == e.name.sequence) ||
                      (i + 1 < copy->queue.size() && copy->queue[i + 1].name.sequence == e.name.sequence);
    if (tied) need.push_back(i);
  }
  if (need.empty()) {
    evaluate(copy);
    return;
  }
  auto self = shared_from_this();
  auto remaining = std::make_shared<std::size_t>(need.size());
  const auto gen = generation_;
  for (auto i : need) {
    impl_->exists(req_.lock_path + "/" + copy->queue[i].name.name, nullptr,
                  [self, copy, remaining, i, gen](Status st, const Stat& s) {
                    std::lock_guard lk(self->mu_);
                    copy->queue[i].czxid = st.ok() ? s.czxid : -1;  // -1: gone
                    if (--*remaining > 0 || gen != self->generation_) return;
                    if (self->phase_ != Phase::creating && self->phase_ != Phase::waiting) return;
                    std::erase_if(copy->queue, [](const QueueEntry& e) { return e.czxid < 0; });
                    std::sort(copy->queue.begin(), copy->queue.end(), queue_less);
                    copy->by_guid.clear();
                    for (std::size_t j = 0; j < copy->queue.size(); ++j) copy->by_guid.emplace(copy->queue[j].name.guid, j);
                    copy->has_ties = false;
                    self->evaluate(copy);
                  });
  }
}

// REQUIRES mu_; `listing` is in queue order and contains our node. A node is
// granted when nothing it must wait for is ahead of it: an exclusive node
// waits for every earlier node, a shared node for earlier exclusive ones.
void LockAttempt::evaluate(std::shared_ptr<const Listing> listing) {
  const auto it = listing->by_guid.find(guid_);
  if (it == listing->by_guid.end()) {
    own_node_gone_locked();
    return;
  }
  listing_ = listing;
  self_index_ = it->second;
  for (std::size_t i = self_index_; i-- > 0;) {
    if (req_.mode == Mode::exclusive || listing->queue[i].name.mode == Mode::exclusive) {
      phase_ = Phase::waiting;
      watch_blocker(listing->queue[i]);
      return;
    }
  }
  grant();
}

// REQUIRES mu_. One exists watch, on the blocker only: no herd.
void LockAttempt::watch_blocker(const QueueEntry& blocker) {
  blocker_ = blocker.name.name;
  std::weak_ptr<LockAttempt> weak = shared_from_this();
  const auto gen = generation_;
  auto on_gone = [weak, blocker, gen] {
    auto s = weak.lock();
    if (!s) return;
    std::lock_guard lk(s->mu_);
    if (gen != s->generation_ || s->phase_ != Phase::waiting || s->blocker_ != blocker.name.name) return;
    s->on_blocker_gone(blocker);
  };
  impl_->exists(
      req_.lock_path + "/" + blocker.name.name,
      [on_gone](const WatchEvent& ev) {
        if (ev.type == WatchEvent::Type::deleted) on_gone();
      },
      [weak, on_gone](Status st, const Stat&) {
        if (st.is(Errc::no_node)) {
          on_gone();
        } else if (!st.ok()) {
          auto s = weak.lock();
          if (!s) return;
          std::lock_guard lk(s->mu_);
          if (s->phase_ != Phase::waiting) return;
          if (transient(st)) {
            if (s->impl_->connected()) s->resync();
          } else {
            s->fail(st.error("watching " + s->req_.lock_path));
          }
        }
      });
}

// REQUIRES mu_. The hand-off. If the lock parent's data names the blocker,
// the blocker was a granted holder (invariant 2): everything ahead of it was
// gone when it was granted, nothing can be created ahead of us later, and we
// listed nothing between it and us that we must wait for — so we hold the
// lock, for the price of one small read whatever the queue length. A shared
// holder's release proves nothing about other readers, so a writer whose
// blocker was a reader checks the other earlier nodes it knows of (the only
// candidates). Any other marker (the blocker abandoned, expired, was
// revoked): list again.
void LockAttempt::on_blocker_gone(const QueueEntry& blocker) {
  if (only_blocker_listed(blocker)) {
    grant();
    return;
  }
  auto self = shared_from_this();
  const auto gen = generation_;
  impl_->get(req_.lock_path, nullptr, [self, blocker, gen](Status st, std::string marker, const Stat&) {
    std::lock_guard lk(self->mu_);
    if (gen != self->generation_ || self->phase_ != Phase::waiting) return;
    if (!st.ok()) {
      if (transient(st)) {
        if (self->impl_->connected()) self->resync();
      } else {
        self->relist();
      }
      return;
    }
    if (marker != blocker.name.name) {
      self->relist();
    } else if (blocker.name.mode == Mode::exclusive) {
      self->grant();
    } else {
      self->check_earlier_candidates();
    }
  });
}

// REQUIRES mu_. The nodes ahead of us only ever shrink: our listing was
// issued after our create, so it held every node ordered before ours, and any
// node created later is ordered after ours. If the blocker was the only node
// in that listing that could block us, its deletion leaves nothing ahead of
// us that blocks — whether it was released, abandoned or revoked — and the
// hand-off needs no read: a lone waiter is granted on the notification.
bool LockAttempt::only_blocker_listed(const QueueEntry& blocker) const {
  if (!listing_) return false;
  for (std::size_t i = 0; i < self_index_; ++i) {
    const auto& e = listing_->queue[i];
    if (e.name.name == blocker.name.name) continue;
    if (req_.mode == Mode::exclusive || e.name.mode == Mode::exclusive) return false;
  }
  return true;
}

// REQUIRES mu_. Pipelined exists (no watch) on every earlier node we know of;
// the nearest one that still exists and blocks us is watched next.
void LockAttempt::check_earlier_candidates() {
  if (!listing_ || self_index_ == 0) {
    grant();
    return;
  }
  auto self = shared_from_this();
  const auto n = self_index_;
  auto alive = std::make_shared<std::vector<bool>>(n, false);
  auto remaining = std::make_shared<std::size_t>(n);
  const auto gen = generation_;
  auto listing = listing_;
  for (std::size_t i = 0; i < n; ++i) {
    impl_->exists(req_.lock_path + "/" + listing->queue[i].name.name, nullptr,
                  [self, alive, remaining, i, gen, listing](Status st, const Stat&) {
                    std::lock_guard lk(self->mu_);
                    (*alive)[i] = !st.is(Errc::no_node);  // errors count as alive: watched below
                    if (--*remaining > 0 || gen != self->generation_ || self->phase_ != Phase::waiting) return;
                    for (std::size_t j = alive->size(); j-- > 0;) {
                      if ((*alive)[j] && (self->req_.mode == Mode::exclusive ||
                                          listing->queue[j].name.mode == Mode::exclusive)) {
                        self->watch_blocker(listing->queue[j]);
                        return;
                      }
                    }
                    self->grant();
                  });
  }
}

// REQUIRES mu_.
void LockAttempt::relist() {
  ++generation_;
  list_soon(false);
}

// REQUIRES mu_. After a connection loss in the middle of a step: list again;
// on_listing finds our node by GUID (or learns the create never ran).
void LockAttempt::resync() {
  if (phase_ != Phase::creating && phase_ != Phase::waiting) return;
  relist();
}

// REQUIRES mu_. Holders and waiters watch their own node: a deletion we did
// not make is a revocation (or expiry), noticed within one notification.
void LockAttempt::watch_own_node() {
  std::weak_ptr<LockAttempt> weak = shared_from_this();
  impl_->exists(
      node_path_,
      [weak](const WatchEvent& ev) {
        if (ev.type != WatchEvent::Type::deleted) return;
        if (auto s = weak.lock()) s->on_own_node_deleted();
      },
      [weak](Status st, const Stat&) {
        if (!st.is(Errc::no_node)) return;
        if (auto s = weak.lock()) s->on_own_node_deleted();  // deleted before the watch was set
      });
}

void LockAttempt::on_own_node_deleted() {
  std::lock_guard lk(mu_);
  own_node_gone_locked();
}

// REQUIRES mu_.
void LockAttempt::own_node_gone_locked() {
  if (!node_exists_ || deleting_ || phase_ == Phase::released) return;
  node_exists_ = false;
  revoked_ = true;
  if (phase_ == Phase::failed) return;
  // The revoker wrote a record in the same transaction that deleted the node.
  auto self = shared_from_this();
  impl_->get(kRevocations + node_name_, nullptr, [self](Status st, std::string record, const Stat&) {
    std::string detail = "node deleted by another client (no revocation record)";
    if (st.ok()) {
      auto rec = decode_revocation_record(record);
      detail = rec ? revocation_message(*rec) : "revoked (unreadable record: " + record.substr(0, 200) + ")";
    } else if (!st.is(Errc::no_node)) {
      // No answer: typically the server expired our session (deleting the
      // node, and notifying us before it closed the connection). Without a
      // record we cannot call it a revocation; the session event decides.
      std::lock_guard lk2(self->mu_);
      if (self->phase_ == Phase::held && st.is(Errc::session_expired)) {
        self->lose(LossReason::session_expired, "the ZooKeeper session expired");
      } else if ((self->phase_ == Phase::creating || self->phase_ == Phase::waiting) &&
                 st.is(Errc::session_expired)) {
        self->fail(Error(Errc::session_expired,
                         "the ZooKeeper session expired while waiting for " + self->req_.lock_path));
      }
      return;
    }
    std::lock_guard lk2(self->mu_);
    if (self->phase_ == Phase::held) {
      self->lose(LossReason::revoked, detail);
    } else if (self->phase_ == Phase::creating || self->phase_ == Phase::waiting) {
      self->fail(Error(Errc::deadlock_victim, "deadlock victim: our wait for " + self->req_.lock_path +
                                                  " was revoked; " + detail));
    }
  });
}

void LockAttempt::on_session(SessionEvent ev, std::uint64_t epoch) {
  std::lock_guard lk(mu_);
  const bool ours = epoch_ == 0 || epoch == epoch_;
  if (!ours) return;
  switch (ev) {
    case SessionEvent::lost:
      node_exists_ = false;  // ephemeral: gone with the session
      create_uncertain_ = false;
      if (auto then = std::exchange(retry_then_, nullptr)) then();  // a release waiting for a reconnect
      if (phase_ == Phase::held) lose(LossReason::session_expired, "the ZooKeeper session expired");
      else if (phase_ == Phase::creating || phase_ == Phase::waiting || phase_ == Phase::starting)
        fail(Error(Errc::session_expired, "the ZooKeeper session expired while waiting for " + req_.lock_path));
      break;
    case SessionEvent::suspended:
      suspended_ = true;
      if (phase_ == Phase::held && req_.policy == LossPolicy::strict) {
        lose(LossReason::disconnected, "disconnected from ZooKeeper (strict policy)");
      }
      break;
    case SessionEvent::validity_expired:
      if (phase_ == Phase::held) {
        lose(LossReason::validity_expired, "disconnected past the validity bound; the session may have expired");
      }
      break;
    case SessionEvent::reconnected:
      suspended_ = false;
      if (phase_ == Phase::held && loss_ && node_exists_) {
        delete_own_node(true, nullptr);  // strict policy or validity loss: give the lock up
      } else if (phase_ == Phase::failed && create_uncertain_ && !node_exists_) {
        sweep_uncertain_create();
      } else if (create_uncertain_ || phase_ == Phase::creating || phase_ == Phase::waiting) {
        resync();
      } else if ((phase_ == Phase::failed || phase_ == Phase::released) && node_exists_ && !deleting_) {
        delete_own_node(retry_marker_, std::exchange(retry_then_, nullptr));
      }
      break;
    case SessionEvent::connected:
      break;
  }
}

// REQUIRES mu_.
void LockAttempt::grant() {
  phase_ = Phase::held;
  if (timer_ != 0) impl_->cancel(timer_);
  timer_ = 0;
  auto done = std::move(done_);
  done_ = nullptr;
  auto self = std::move(pending_self_);
  if (done) done(AcquireResult{Lease(self), std::nullopt});
}

// REQUIRES mu_. Terminal failure of the acquisition; our node is deleted.
void LockAttempt::fail(Error error) {
  if (phase_ == Phase::failed || phase_ == Phase::released || phase_ == Phase::held) return;
  phase_ = Phase::failed;
  if (node_exists_) delete_own_node(false, nullptr);
  if (create_uncertain_ && !node_exists_) keep_alive_while_cleaning();  // on_created or a reconnect cleans up
  finish_locked();
  auto done = std::move(done_);
  done_ = nullptr;
  // Outlive this frame: the caller may hold the last other reference.
  impl_->defer([keep = std::move(pending_self_)] {});
  if (done) done(AcquireResult{Lease(), std::move(error)});
}

void LockAttempt::abandon(Errc why, std::string message) {
  std::lock_guard lk(mu_);
  if (phase_ == Phase::held || phase_ == Phase::failed || phase_ == Phase::released) return;
  fail(Error(why, std::move(message)));
}

// REQUIRES mu_.
void LockAttempt::lose(LossReason reason, std::string detail) {
  if (loss_) return;
  loss_ = reason;
  loss_detail_ = std::move(detail);
  impl_->log->warn("lease on {} ({}) lost: {} — {}", req_.lock_path, token_.str(), loss_reason_name(reason),
                   loss_detail_);
  auto cbs = std::move(lost_cbs_);
  lost_cbs_.clear();
  auto self = shared_from_this();
  impl_->post_user([self, cbs = std::move(cbs), reason, detail = loss_detail_] {
    self->lost_source_.request_stop();
    for (auto& cb : cbs) cb(reason, detail);
  });
}

// REQUIRES mu_. Deletes our node; with the marker only for a granted node
// (invariant 2). Connection loss: retried when the same session is back;
// session loss: the node went with it.
void LockAttempt::delete_own_node(bool with_marker, std::function<void()> then) {
  if (!node_exists_) {
    if (then) then();
    return;
  }
  deleting_ = true;
  auto self = shared_from_this();
  auto finish = [self, then, with_marker](Status st) {
    std::lock_guard lk(self->mu_);
    if (transient(st) && self->impl_->epoch() == self->epoch_) {
      self->deleting_ = false;  // on_session(reconnected) retries, as it was asked (marker, then)
      self->retry_marker_ = with_marker;
      self->retry_then_ = then;
      // A released or failed attempt may have no owner left by then (the
      // caller gave up waiting and dropped the lease); a restarted server
      // restores sessions, so that reconnect can come any time later.
      if (self->phase_ == Phase::released || self->phase_ == Phase::failed) self->keep_alive_while_cleaning();
      if (self->impl_->connected()) self->delete_own_node(with_marker, std::exchange(self->retry_then_, nullptr));
      return;
    }
    self->deleting_ = false;
    self->node_exists_ = false;
    if (then) then();
  };
  if (with_marker) {
    impl_->multi({Op::remove(node_path_), Op::set_data(req_.lock_path, node_name_)},
                 [finish](Status st, std::vector<OpResult>) { finish(st); });
  } else {
    impl_->remove(node_path_, -1, finish);
  }
}

// REQUIRES mu_. The attempt failed after a create whose answer was lost
// (create_uncertain_): the create may have run. List once, adopt the node
// carrying our GUID and delete it (delete_own_node retries after a reconnect).
// A transient failure leaves create_uncertain_ set for the next reconnect.
void LockAttempt::sweep_uncertain_create() {
  if (sweeping_) return;
  sweeping_ = true;
  auto self = shared_from_this();
  impl_->get_children(req_.lock_path, nullptr, [self](Status st, std::vector<std::string> children) {
    std::lock_guard lk(self->mu_);
    self->sweeping_ = false;
    if (!self->create_uncertain_ || self->node_exists_ || transient(st)) return;
    self->create_uncertain_ = false;  // no_node: the lock path is gone, so is our node
    if (!st.ok()) return;
    for (const auto& c : children) {
      const auto n = parse_lock_node_name(c);
      if (!n || n->guid != self->guid_) continue;
      if (!self->node_exists_) {
        self->node_exists_ = true;
        self->node_name_ = c;
        self->node_path_ = self->req_.lock_path + "/" + c;
        self->epoch_ = Client::Impl::callback_epoch();
        self->delete_own_node(false, nullptr);
      } else {
        self->impl_->remove(self->req_.lock_path + "/" + c, -1, [](Status) {});  // not expected: one per GUID
      }
    }
  });
}

// REQUIRES mu_. Nobody may hold a failed or released attempt any more, yet
// it must outlive a lost create's answer or a delete that failed for want of
// a connection, to clean up once the same session is back. The timer thread holds it (not a
// self-reference, which would outlive the client): re-armed while cleanup is
// pending, dropped when the client shuts down.
void LockAttempt::keep_alive_while_cleaning() {
  if (keeping_alive_) return;
  keeping_alive_ = true;
  auto self = shared_from_this();
  impl_->schedule_at(Clock::now() + std::max(impl_->negotiated(), std::chrono::milliseconds(100)), [self] {
    std::lock_guard lk(self->mu_);
    self->keeping_alive_ = false;
    if (self->create_uncertain_ ||
        (self->node_exists_ && (self->phase_ == Phase::failed || self->phase_ == Phase::released))) {
      self->keep_alive_while_cleaning();
    }
  });
}

// REQUIRES mu_.
void LockAttempt::finish_locked() {
  if (timer_ != 0) impl_->cancel(timer_);
  timer_ = 0;
  if (registered_) {
    std::lock_guard lk(g_registry_mu);
    g_registry.erase(registry_key(impl_, req_.lock_path, owner_));
    registered_ = false;
  }
}

// Deletes our node, with the marker unless it was revoked (invariant 2);
// `then` runs (under mu_, so it must not block) once the node is gone. False,
// and `then` dropped, when the attempt was already released or failed.
bool LockAttempt::start_release(std::function<void()> then) {
  std::lock_guard lk(mu_);
  if (phase_ == Phase::released || phase_ == Phase::failed) return false;
  phase_ = Phase::released;
  finish_locked();
  delete_own_node(!revoked_, std::move(then));
  return true;
}

void LockAttempt::release() noexcept {
  try {
    auto promise = std::make_shared<std::promise<void>>();
    auto future = promise->get_future();
    if (!start_release([promise] { promise->set_value(); })) return;
    if (Client::Impl::in_callback()) return;  // never block ZooKeeper's thread
    future.wait_for(impl_->negotiated() + 2s);
  } catch (...) {
  }
}

void LockAttempt::release_async(std::function<void()> done) noexcept {
  try {
    auto post = [impl = impl_ref_, done = std::move(done)] {
      if (done) impl->post_user(done);
    };
    if (!start_release(post)) post();
  } catch (...) {
  }
}

bool LockAttempt::valid() const {
  std::lock_guard lk(mu_);
  return phase_ == Phase::held && !loss_ && node_exists_ && impl_->epoch() == epoch_ &&
         Clock::now() < impl_->valid_until();
}

bool LockAttempt::suspended() const {
  std::lock_guard lk(mu_);
  return phase_ == Phase::held && !loss_ && suspended_;
}

std::optional<LossReason> LockAttempt::loss_reason() const {
  std::lock_guard lk(mu_);
  return loss_;
}

std::string LockAttempt::loss_detail() const {
  std::lock_guard lk(mu_);
  return loss_detail_;
}

void LockAttempt::on_lost(std::function<void(LossReason, const std::string&)> cb) {
  std::lock_guard lk(mu_);
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
