// What a Lease asks of its attempt: its grant and token, validity, loss, and release.
//
// Every call names the lease's grant (lock_attempt.hpp, invariant 4): a
// lease of an earlier grant of a retained node sees itself released, never
// the later grant's state.
#include <future>
#include <utility>

#include "attempt_tables.hpp"
#include "lock_attempt.hpp"
#include "logged_call.hpp"

namespace zklock::detail {

std::pair<std::uint64_t, FencingToken> LockAttempt::current_grant() const {
  std::lock_guard lk(mu_);
  return {grant_, token_};
}

std::stop_token LockAttempt::lost_token(std::uint64_t grant) const {
  std::lock_guard lk(mu_);
  return grant == grant_ ? lost_source_.get_token() : std::stop_token();
}

// Neither throws (a Lease's destructor releases): a failure is logged.
void LockAttempt::release(std::uint64_t grant) noexcept {
  logged_call(*impl_->log, "releasing ", req_.lock_path, [&] {
    auto promise = std::make_shared<std::promise<void>>();
    auto future = promise->get_future();
    if (!start_release(grant, [promise] { promise->set_value(); })) return;
    if (Client::Impl::in_callback()) return;  // never block ZooKeeper's thread
    future.wait_for(impl_->negotiated() + std::chrono::seconds(2));
  });
}

void LockAttempt::release_async(std::uint64_t grant, std::function<void()> done) noexcept {
  logged_call(*impl_->log, "releasing ", req_.lock_path, [&] {
    auto post = [impl = seat_.session(), done = std::move(done)] {
      if (done) impl->post_user(done);
    };
    if (!start_release(grant, post)) post();
  });
}

bool LockAttempt::valid(std::uint64_t grant) const {
  std::lock_guard lk(mu_);
  // The bound of our session only, read consistently: a new session proves nothing about our node.
  return grant == grant_ && machine_ && machine_->holding(Clock::now(), impl_->valid_until_of(epoch_));
}

bool LockAttempt::suspended(std::uint64_t grant) const {
  std::lock_guard lk(mu_);
  return grant == grant_ && machine_ && machine_->phase() == LockMachine::Phase::held && !machine_->loss() &&
         machine_->suspended();
}

std::optional<LossReason> LockAttempt::loss_reason(std::uint64_t grant) const {
  std::lock_guard lk(mu_);
  return grant == grant_ && machine_ ? machine_->loss() : std::nullopt;  // an earlier grant was released cleanly
}

std::string LockAttempt::loss_detail(std::uint64_t grant) const {
  std::lock_guard lk(mu_);
  return grant == grant_ && machine_ ? machine_->loss_detail() : std::string();
}

void LockAttempt::on_lost(std::uint64_t grant, std::function<void(LossReason, const std::string&)> cb) {
  std::lock_guard lk(mu_);
  if (grant != grant_ || !machine_) return;  // released: never lost
  if (const auto r = machine_->loss()) {
    impl_->post_user([cb = std::move(cb), r = *r, d = machine_->loss_detail()] { cb(r, d); });
    return;
  }
  lost_cbs_.push_back(std::move(cb));
}

// `then` runs once the node is gone (on the thread that learns it). False,
// and `then` dropped, when the lease was already released.
bool LockAttempt::start_release(std::uint64_t grant, std::function<void()> then) {
  bool started = false;
  locked([&] {
    if (!machine_ || machine_->phase() != LockMachine::Phase::held || grant != grant_) return;
    started = true;
    observe_released_locked();
    if (req_.mode == Mode::exclusive) impl_->attempt_tables->history.remember(req_.lock_path, machine_->others_seen());
    // The lease is over: its on_lost callbacks must never run, not even for
    // a later grant of a retained node. Destroyed unlocked (outbox_): one
    // may hold the last copy of a Lease, whose destructor takes mu_.
    if (!lost_cbs_.empty()) outbox_.push_back([cbs = std::exchange(lost_cbs_, {})] {});
    finish_locked();
    release_waiters_.push_back(std::move(then));
    MachineEvent ev{Kind::release};
    auto slot = reserve_idle_locked();
    ev.may_retain = slot != nullptr;
    step_locked(std::move(ev));
    if (machine_->phase() == LockMachine::Phase::retained) retain_locked(std::move(slot));
  });
  return started;
}

}  // namespace zklock::detail
