// Retained leases in the shell: the mutex's slot for an idle node, its retain timer, and the re-take.
//
// The machine decides when a node may be kept and when a re-take grants
// (lock_machine.hpp, invariant 5); this file keeps the idle attempt alive in
// its mutex's RetainSlot and hands it a re-take by the same owner.
#include <utility>

#include "lock_attempt.hpp"

namespace zklock::detail {
namespace {

using Kind = MachineEvent::Kind;

}  // namespace

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
    if (!enter_registry()) return;
    taken = true;
    if (retain_timer_ != 0) impl_->cancel(retain_timer_);
    retain_timer_ = 0;
    done_ = std::move(done);
    fallback_ = std::make_unique<AttemptRequest>(std::move(fallback));
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

}  // namespace zklock::detail
