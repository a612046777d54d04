// ClientOptions::observer: what the lock shell tells it, and when.
//
// Every call runs while no zklock mutex is held: acquire_started on the
// acquiring thread before the attempt starts; granted and failed inside the
// attempt's `done`, which the shell runs from its outbox after releasing
// mu_ (lock_attempt.hpp, locked()); released and lost from the outbox too.
// Without an observer each event costs one null check: nothing is queued,
// captured or timed.
#include <utility>

#include "lock_attempt.hpp"
#include "logged_call.hpp"

namespace zklock::detail {
namespace {

// An observer that throws must not unwind through the shell's outbox.
template <class Fn>
void notify(spdlog::logger& log, Fn&& fn) noexcept {
  logged_call(log, "lock observer threw", "", std::forward<Fn>(fn));
}

}  // namespace

void LockAttempt::start_observed(Client& client, AttemptRequest request, Done done) {
  auto impl = ClientAccess::impl(client);
  const std::shared_ptr<LockObserver>& observer = impl->opts.observer;
  if (!observer) {
    start(client, std::move(request), std::move(done));
    return;
  }
  const auto t0 = Clock::now();
  notify(*impl->log, [&] { observer->acquire_started(request.lock_path); });
  auto observed = [observer, log = impl->log, path = request.lock_path, t0,
                   done = std::move(done)](AcquireResult r) {
    const auto wait = Clock::now() - t0;
    notify(*log, [&] {
      if (r.error) observer->failed(path, wait, r.error->code());
      else observer->granted(path, wait, grant_of(r.lease) > 1);
    });
    done(std::move(r));
  };
  const std::string path = request.lock_path;
  try {
    start(client, std::move(request), std::move(observed));
  } catch (const Error& e) {  // refused before anything was sent (would_deadlock, invalid_argument)
    notify(*impl->log, [&] { observer->failed(path, Clock::now() - t0, e.code()); });
    throw;
  }
}

// `this` outlives the queued call: the outbox runs before locked() returns.
void LockAttempt::observe_released_locked() {
  auto* observer = impl_->opts.observer.get();
  if (!observer || machine_->loss()) return;
  outbox_.push_back([this, observer, held = Clock::now() - handed_out_at_] {
    notify(*impl_->log, [&] { observer->released(req_.lock_path, held); });
  });
}

void LockAttempt::observe_lost_locked(LossReason reason) {
  auto* observer = impl_->opts.observer.get();
  if (!observer) return;
  outbox_.push_back([this, observer, reason] {
    notify(*impl_->log, [&] { observer->lost(req_.lock_path, reason); });
  });
}

}  // namespace zklock::detail
