// LockAttempt's lifecycle: start, each event through the machine, outcomes out, and the attempt's end.
#include "lock_attempt.hpp"

#include <future>
#include <utility>

#include "attempt_tables.hpp"
#include "lock_front.hpp"

namespace zklock::detail {
namespace {

using Out = MachineOutcome::Kind;

// make_shared adds a 16-byte header; glibc's thread cache takes up to 1,032.
// Checked where the layout was measured (libstdc++, no debug containers).
#if defined(__GLIBCXX__) && !defined(_GLIBCXX_DEBUG)
static_assert(sizeof(LockAttempt) <= 1000, "keep the attempt in malloc's thread cache (lock_attempt.hpp)");
#endif

}  // namespace

// owner_, not owner_for: the thread that runs begin() may not be the caller's.
Holder LockAttempt::holder() const {
  return Holder{owner_, req_.options.priority, req_.options.description, req_.policy};
}

LockAttempt::LockAttempt(Client& client, Seat seat, AttemptRequest request, Done done)
    : client_(&client), impl_(seat.session().get()), seat_(std::move(seat)),
      req_(std::move(request)), done_(std::move(done)) {
  owner_ = owner_for(client, req_.options);
  guid_ = protocol::new_guid();
  data_ = node_data_for(*impl_, req_, owner_);  // throws invalid_argument for an over-long owner
}

LockAttempt::~LockAttempt() {
  if (observer_ != 0) impl_->unobserve(observer_);
  // No other reference exists, so the helpers' REQUIRES mu_ holds as is.
  end_acquiring_locked();  // an attempt dropped before its outcome (the client closing)
  unlist_idle_locked();
}

void LockAttempt::start(Client& client, AttemptRequest request, Done done) {
  validate_lock_path(request.lock_path);
  // The one check of "exclusive only": a reader never retains.
  if (request.mode != Mode::exclusive) request.retain = std::chrono::milliseconds::zero();
  if (retake_from_slot(request, done)) return;
  // The session with room for its watches (session_pool.hpp); a re-take
  // above stays on its node's.
  const auto& primary = ClientAccess::impl(client);
  auto seat = primary->shards->seat(primary, attempt_watch_bytes(primary->opts, request.lock_path));
  auto self = std::make_shared<LockAttempt>(client, std::move(seat), std::move(request), std::move(done));
  if (!self->enter_registry()) {
    throw Error(Errc::would_deadlock, "owner '" + self->owner_ + "' already holds or waits for " +
                                          self->req_.lock_path + " in this process (zklock locks are not re-entrant)");
  }
  self->begin_acquiring();  // before our create: the owner's idle nodes go first (invariant 6)
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
      case SessionEvent::validity_proven: e.kind = Kind::validity_proven; break;
    }
    e.epoch = epoch;
    if (auto s = weak.lock()) s->feed(std::move(e));
  });
  const auto cancel = [weak](Errc errc, std::string message) {
    auto s = weak.lock();
    if (!s) return;
    MachineEvent e{Kind::cancel};
    e.errc = errc;
    e.detail = std::move(message);
    s->feed(std::move(e));
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
  start_observed(client, std::move(request), [promise](AcquireResult r) { promise->set_value(std::move(r)); });
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
      const auto& r = self->req_;
      self->machine_ = std::make_unique<LockMachine>(MachineConfig{
          r.mode, self->guid_, self->holder(), self->epoch_, r.lock_path, r.retain > std::chrono::milliseconds::zero(),
          r.mode == Mode::exclusive ? self->impl_->attempt_tables->history.seen_before(r.lock_path)
                                    : LockHistory::contended});
      self->execute_locked(self->machine_->start());
    });
  };
  if (auto cached = impl_->cached_ensemble_id(); !cached.empty()) {
    with_id(Status{}, cached);
  } else {
    impl_->ensemble_id_async(std::move(with_id));
  }
}

void LockAttempt::feed(MachineEvent ev) {
  locked([&] {
    if (machine_) {
      step_locked(std::move(ev));
    } else if (ev.kind == Kind::cancel && done_) {  // before the ensemble id arrived: nothing was sent, no machine
      deliver_locked(Error(ev.errc, ev.detail));
    }
  });
}

// The clock's verdict goes with every event (lock_machine.hpp, invariant 9):
// the bound of our session only, read consistently (valid_until_of). A
// re-take's `confirmed` is timed from the latest listing the machine says
// showed our node.
void LockAttempt::step_locked(MachineEvent ev) {
  ev.within_bound = Clock::now() < impl_->valid_until_of(epoch_);
  ev.no_bound = impl_->validity_refused();
  const auto confirmations = machine_->confirmations();
  execute_locked(machine_->step(ev));
  if (machine_->confirmations() != confirmations) confirmed_at_ = Clock::now();
}

LockAttempt::Done LockAttempt::end_locked() {
  finish_locked();
  impl_->defer([keep = std::move(pending_self_)] {});  // outlive whoever called us
  return std::exchange(done_, nullptr);
}

void LockAttempt::deliver_locked(Error error) {
  if (auto done = end_locked()) {
    outbox_.push_back([done = std::move(done), error = std::move(error)] { done(AcquireResult{Lease(), error}); });
  }
}

void LockAttempt::execute_locked(LockMachine::Commands cmds) {
  for (const auto& r : cmds.requests) send_locked(r);
  for (const auto& o : cmds.outcomes) report_locked(o);
  const auto phase = machine_->phase();
  if (phase != LockMachine::Phase::retained) unlist_idle_locked();
  // A retention over: its confirmation's timer goes (retain_locked).
  if (phase == LockMachine::Phase::ending || machine_->finished()) drop_timer(watchdog_timer_);
  // Invariant (3): once released or failed, nobody need hold the attempt
  // (release_async's caller drops its Lease at once), yet the remove in
  // flight must still be answered, retried after a reconnect, and reported.
  // Retained idle, the slot holds it (an abandoned re-take kept it alive).
  const bool over = phase == LockMachine::Phase::failed || phase == LockMachine::Phase::released ||
                    phase == LockMachine::Phase::releasing || phase == LockMachine::Phase::ending;
  if (over && !machine_->finished()) {
    keep_alive_while_cleaning();
  } else if (keep_alive_timer_ != 0 && (machine_->finished() || phase == LockMachine::Phase::retained)) {
    // Cleaned up: drop the timer now rather than let it fire (a timer-thread
    // wake per release, and the attempt held for a session timeout). The
    // outbox keeps us alive until mu_ is released (execute_locked always
    // runs inside locked()), so the timer's reference is never the last.
    outbox_.push_back([keep = shared_from_this()] {});
    impl_->cancel(std::exchange(keep_alive_timer_, 0));
  }
}

void LockAttempt::report_locked(const MachineOutcome& c) {
  switch (c.kind) {
    case Out::granted: {
      if (grant_ == 0) {  // a re-take grants the same node: its czxid, the machine's next ordinal
        node_path_ = child_path(machine_->node_name());
        const auto parsed = protocol::parse_lock_node_name(machine_->node_name());
        token_ = FencingToken(ensemble_id_, c.token, parsed ? parsed->sequence : 0);
      }
      token_ = std::move(token_).with_ordinal(c.ordinal);
      ++grant_;
      end_wait_locked();
      if (grant_ > 1) {
        // A re-take: the earlier lease's token and callbacks stay quiet (its
        // release dropped the callbacks already; this keeps it so whatever
        // path led here). Destroyed unlocked, as in start_release.
        lost_source_ = std::stop_source();
        if (!lost_cbs_.empty()) outbox_.push_back([cbs = std::exchange(lost_cbs_, {})] {});
      }
      if (impl_->opts.observer) handed_out_at_ = Clock::now();
      if (auto done = std::exchange(done_, nullptr)) {
        outbox_.push_back([done = std::move(done), self = std::move(pending_self_)] {
          done(AcquireResult{Lease(self), std::nullopt});
        });
      }
      break;
    }
    case Out::failed:
      deliver_locked(Error(c.errc, c.message));
      break;
    case Out::lost: {
      impl_->log->warn("lease on {} ({}) lost: {} — {}", req_.lock_path, token_.str(), loss_reason_name(c.reason),
                       c.message);
      observe_lost_locked(c.reason);
      auto cbs = std::exchange(lost_cbs_, {});
      impl_->post_user([src = lost_source_, cbs = std::move(cbs), reason = c.reason, detail = c.message]() mutable {
        src.request_stop();
        for (auto& cb : cbs) cb(reason, detail);
      });
      break;
    }
    case Out::released:
      for (auto& then : std::exchange(release_waiters_, {})) outbox_.push_back(std::move(then));
      break;
    case Out::retake_void:
      retake_void_locked(c.message);
      break;
    case Out::notice:
      impl_->log->warn("{}", c.message);
      break;
    case Out::diverged:
      impl_->note_diverged(req_.lock_path, c.message);
      break;
  }
}

// REQUIRES mu_. Nobody may hold a failed or released attempt any more, yet
// it must outlive its cleanup (a create's answer, a delete retried after a
// reconnect). The timer thread holds it — not a self-reference, which would
// outlive the client — re-armed while cleanup is pending.
void LockAttempt::keep_alive_while_cleaning() {
  if (keep_alive_timer_ != 0) return;
  keep_alive_timer_ = impl_->schedule_at(Clock::now() + std::max(impl_->negotiated(), std::chrono::milliseconds(100)),
                                         [self = shared_from_this()] {
                                           std::lock_guard lk(self->mu_);
                                           self->keep_alive_timer_ = 0;
                                           if (!self->machine_->finished()) self->keep_alive_while_cleaning();
                                         });
}

void LockAttempt::end_wait_locked() {
  end_acquiring_locked();
  drop_timer(watchdog_timer_);
  drop_timer(timer_);
}

void LockAttempt::finish_locked() {
  end_wait_locked();
  impl_->unwatch(std::exchange(blocker_watch_, {}));
  if (std::exchange(registered_, false)) impl_->attempt_tables->owners.leave(req_.lock_path, owner_);
}

bool LockAttempt::enter_registry() {
  registered_ = impl_->attempt_tables->owners.enter(req_.lock_path, owner_);
  return registered_;
}

}  // namespace zklock::detail
