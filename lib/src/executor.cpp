// The Executor's two threads: the timer loop, the callback loop, and how each survives its tasks.
#include "executor.hpp"

namespace zklock {

Executor::Executor(std::shared_ptr<spdlog::logger> log, TimerRunner runner)
    : log_(std::move(log)), runner_(std::move(runner)) {}

Executor::~Executor() { stop(); }

void Executor::start() {
  timer_thread_ = std::thread([this] { timer_loop(); });
  user_thread_ = std::thread([this] { callback_loop(); });
}

void Executor::stop() {
  {
    std::lock_guard lk(timer_mu_);
    timer_stop_ = true;
  }
  timer_cv_.notify_all();
  if (timer_thread_.joinable()) timer_thread_.join();
  {
    std::lock_guard lk(user_mu_);
    user_stop_ = true;
  }
  user_cv_.notify_all();
  if (user_thread_.joinable()) user_thread_.join();
}

Executor::TimerId Executor::schedule_at(Clock::time_point when, Task fn) {
  std::lock_guard lk(timer_mu_);
  const auto id = next_timer_++;
  const auto it = timers_.emplace(when, std::make_pair(id, std::move(fn)));
  timer_index_.emplace(id, it);
  // Wake the loop only for a deadline earlier than the one it sleeps until
  // (a deferred task always is). Not merely the earliest now: a timer
  // cancelled and replaced by a later one (a retained lock's retain timer,
  // on every re-take and release) leaves the loop sleeping until the old
  // deadline, which comes first anyway; waking it for each cost a context
  // switch per lock operation.
  if (when < sleeping_until_) timer_cv_.notify_one();
  return id;
}

void Executor::cancel(TimerId id) {
  Task dropped;  // destroyed after the lock, declared before it
  std::lock_guard lk(timer_mu_);
  const auto found = timer_index_.find(id);
  if (found == timer_index_.end()) return;  // ran already, or never was
  dropped = std::move(found->second->second.second);
  timers_.erase(found->second);
  timer_index_.erase(found);
}

void Executor::run_timer_task(const Task& task, bool draining) noexcept {
  const char* when = draining ? " while closing" : "";
  try {
    if (runner_) runner_(task, draining);
    else task();
  } catch (const std::exception& e) {
    log_->error("zklock timer task failed{}: {}", when, e.what());
  } catch (...) {
    // A foreign exception (not derived from std::exception) must not end
    // this thread: every later timer, and every deferred callback, runs here.
    log_->error("zklock timer task failed{} with a non-standard exception", when);
  }
}

void Executor::timer_loop() {
  std::unique_lock lk(timer_mu_);
  while (true) {
    if (timer_stop_) {
      // Run what is already due (deferred failure callbacks release waiters),
      // drop future timers. Bounded: tasks added while draining run once more.
      for (int round = 0; round < 4 && !timers_.empty(); ++round) {
        auto due = std::move(timers_);
        timers_.clear();
        timer_index_.clear();
        lk.unlock();
        for (auto& [when, task] : due) {
          if (when == Clock::time_point::min()) run_timer_task(task.second, true);
        }
        lk.lock();
      }
      timers_.clear();
      timer_index_.clear();
      return;
    }
    if (timers_.empty()) {
      sleeping_until_ = Clock::time_point::max();
      timer_cv_.wait(lk);
      sleeping_until_ = Clock::time_point::min();
      continue;
    }
    auto it = timers_.begin();
    if (it->first > Clock::now()) {
      // By value: cancel() may erase this entry while we wait, and
      // wait_until reads its deadline again after waking.
      const auto when = it->first;
      sleeping_until_ = when;
      timer_cv_.wait_until(lk, when);
      sleeping_until_ = Clock::time_point::min();
      continue;
    }
    {
      // Destroyed before the lock is taken again: what a task captured may
      // call back into the executor when it goes (cancel, defer).
      auto task = std::move(it->second.second);
      timer_index_.erase(it->second.first);
      timers_.erase(it);
      lk.unlock();
      run_timer_task(task, false);
    }
    lk.lock();
  }
}

std::size_t Executor::pending_timers() {
  std::lock_guard lk(timer_mu_);
  return timers_.size();
}

void Executor::post(Task fn) {
  {
    std::lock_guard lk(user_mu_);
    if (user_stop_) return;
    user_queue_.push_back(std::move(fn));
  }
  user_cv_.notify_one();
}

void Executor::callback_loop() {
  std::unique_lock lk(user_mu_);
  while (true) {
    user_cv_.wait(lk, [&] { return user_stop_ || !user_queue_.empty(); });
    if (user_queue_.empty()) return;  // stopping and drained
    {
      auto fn = std::move(user_queue_.front());  // destroyed unlocked, as above
      user_queue_.pop_front();
      lk.unlock();
      try {
        fn();
      } catch (const std::exception& e) {
        log_->error("zklock user callback threw: {}", e.what());
      } catch (...) {
        log_->error("zklock user callback threw a non-standard exception");
      }
    }
    lk.lock();
  }
}

}  // namespace zklock
