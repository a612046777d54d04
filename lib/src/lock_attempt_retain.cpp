// Retained leases in the shell: the mutex's slot for an idle node, its retain timer, the re-take, and the owner's rule.
//
// The machine decides when a node may be kept and when a re-take grants
// (lock_machine.hpp, invariant 5); this file keeps the idle attempt alive in
// its mutex's RetainSlot, hands it a re-take by the same owner (with the
// clock's verdict), and ends an owner's idle retentions when that owner
// queues anywhere (lock_attempt.hpp, invariants 5 and 6; owner_table.hpp).
#include <utility>

#include "attempt_tables.hpp"
#include "lock_attempt.hpp"
#include "lock_front.hpp"

namespace zklock::detail {

RetainSlot::~RetainSlot() {
  std::shared_ptr<LockAttempt> idle;
  {
    std::lock_guard lk(mu);
    idle = std::move(attempt);
  }
  if (idle) idle->end_retention();
}

// A retained idle attempt in the request's slot serves the request when the
// same owner asks again; any other request ends that retention and queues.
bool LockAttempt::retake_from_slot(AttemptRequest& request, Done& done) {
  auto slot = request.slot.lock();
  if (!slot || request.retain <= std::chrono::milliseconds::zero()) return false;
  std::shared_ptr<LockAttempt> idle;
  {
    std::lock_guard lk(slot->mu);
    idle = std::move(slot->attempt);
  }
  if (!idle) return false;
  if (idle->retake(request, done)) return true;
  idle->end_retention();  // another owner (or not idle any more): it queues normally
  return false;
}

// REQUIRES mu_, before the release is stepped: the release event's
// may_retain (invariant 6). The mutex's slot, or null when nobody can re-take
// (no retention asked, the mutex gone) or the owner has an acquisition under
// way (it may be queued, and must not also stand in a queue as an idle node
// nobody holds). Listed as idle in the same breath (OwnerTable::list_idle),
// so an acquisition by the owner that begins after this ends the retention
// (begin_acquiring); execute_locked unlists it if the machine does not retain.
std::shared_ptr<RetainSlot> LockAttempt::reserve_idle_locked() {
  auto slot = req_.retain > std::chrono::milliseconds::zero() ? req_.slot.lock() : nullptr;
  if (!slot || !impl_->attempt_tables->owners.list_idle(owner_, weak_from_this())) return nullptr;
  idle_listed_ = true;
  return slot;
}

// REQUIRES mu_. The machine kept the node idle: the retain timer ends the
// retention unless a re-take comes first; the slot keeps the attempt alive
// (the slot's lock is taken inside ours here, never the other way round).
void LockAttempt::retain_locked(std::shared_ptr<RetainSlot> slot) {
  std::weak_ptr<LockAttempt> weak = weak_from_this();
  retain_timer_ = impl_->schedule_at(Clock::now() + req_.retain, [weak] {
    if (auto s = weak.lock()) s->feed(MachineEvent{Kind::retain_over});
  });
  std::shared_ptr<LockAttempt> displaced;
  {
    std::lock_guard lk(slot->mu);
    displaced = std::exchange(slot->attempt, shared_from_this());
  }
  if (displaced) outbox_.push_back([displaced] { displaced->end_retention(); });
}

// Invariant (5): decided inside this call, on the caller's thread. The
// machine grants the node again as a new lease (no request) or voids the
// re-take; then the fallback is a normal acquisition, started from the
// outbox once mu_ is released, with the request's whole timeout.
bool LockAttempt::retake(AttemptRequest& fallback, Done& done) {
  bool taken = false;
  locked([&] {
    if (!machine_ || !machine_->may_retake(holder_for(*client_, fallback)) || !enter_registry()) return;
    taken = true;
    drop_timer(retain_timer_);
    done_ = std::move(done);
    pending_self_ = shared_from_this();
    MachineEvent ev{Kind::retake};
    ev.confirmed = Clock::now() - confirmed_at_ < impl_->wait_check_period();
    ev.cancelled = fallback.stop.stop_requested();
    fallback_ = &fallback;
    step_locked(std::move(ev));  // with the bound's verdict
    fallback_ = nullptr;
  });
  return taken;
}

// REQUIRES mu_, inside retake(). Queue anew: the machine's remove went out
// first, so a waiter is ahead of our new node.
void LockAttempt::retake_void_locked(const std::string& why) {
  auto done = end_locked();
  impl_->log->debug("re-take of {} not local: {}", req_.lock_path, why);
  if (!done || !fallback_) return;
  outbox_.push_back([client = client_, done = std::move(done), fallback = std::move(*fallback_)]() mutable {
    try {
      LockAttempt::start(*client, std::move(fallback), done);
    } catch (const Error& e) {
      done(AcquireResult{Lease(), e});
    } catch (const std::exception& e) {
      done(AcquireResult{Lease(), Error(Errc::system_error, e.what())});
    }
  });
}

// Invariant (6). The owner's idle attempts get their release out before
// this attempt's create: one session, so the server applies it first, and
// no snapshot shows our node queued beside an idle node of the owner's.
void LockAttempt::begin_acquiring() {
  const auto idle = impl_->attempt_tables->owners.begin_acquiring(owner_);
  acquiring_ = true;
  for (const auto& w : idle) {
    if (auto a = w.lock()) a->end_retention();  // takes its lock: none is held here
  }
}

void LockAttempt::end_acquiring_locked() {
  if (std::exchange(acquiring_, false)) impl_->attempt_tables->owners.end_acquiring(owner_);
}

void LockAttempt::unlist_idle_locked() {
  if (std::exchange(idle_listed_, false)) impl_->attempt_tables->owners.unlist_idle(owner_, weak_from_this());
}

void LockAttempt::end_retention() {
  locked([&] {
    drop_timer(retain_timer_);
    if (machine_) step_locked(MachineEvent{Kind::retain_over});
  });
}

}  // namespace zklock::detail
