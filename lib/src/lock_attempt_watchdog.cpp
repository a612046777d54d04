// The waiting watchdog's timer in the shell: armed for each wait on a blocker, taken back when the wait ends.
//
// The machine decides what a firing means (lock_machine.hpp, invariant 7);
// the shell only keeps the time: one timer per waiting attempt, no request
// until it fires.
#include <algorithm>

#include "lock_attempt.hpp"

namespace zklock::detail {

// The period grows (x2, at most x8 the base) while the same blocker stays
// ahead, and resets with a new one (each watch_blocker arms it; so does
// each firing while the attempt still waits). Deadlines are rounded up to a
// grid of a quarter of the base period, at most 1 s, so a client's waiters
// on one lock that began waiting close together fire together (their
// listings then share one request, batch_for, not one per waiter), and a
// lost notification costs at most the period and 1 s.
void LockAttempt::arm_watchdog_locked(std::size_t blocker) {
  const auto base = impl_->wait_check_period();
  const auto base_ms = static_cast<std::uint32_t>(base.count());
  watchdog_ms_ = blocker == watchdog_blocker_ && watchdog_ms_ != 0 ? std::min(watchdog_ms_ * 2, base_ms * 8) : base_ms;
  watchdog_blocker_ = blocker;
  drop_timer(watchdog_timer_);
  const auto grid = Clock::duration(std::min<std::chrono::milliseconds>(base / 4, std::chrono::seconds(1))).count();
  const auto want = (Clock::now() + std::chrono::milliseconds(watchdog_ms_)).time_since_epoch().count();
  const Clock::time_point at{Clock::duration((want + grid - 1) / grid * grid)};
  watchdog_timer_ = impl_->schedule_at(at, [weak = weak_from_this()] {
    auto s = weak.lock();
    if (!s) return;
    s->locked([&] {
      s->watchdog_timer_ = 0;
      if (!s->machine_) return;
      s->step_locked(MachineEvent{Kind::watchdog});
      // Still waiting and no new blocker watched yet: look again, later (a
      // new blocker, when the listing shows one, re-arms at the base period).
      if (s->watchdog_timer_ == 0 && s->machine_->phase() == LockMachine::Phase::acquiring)
        s->arm_watchdog_locked(s->watchdog_blocker_);
    });
  });
}

}  // namespace zklock::detail
