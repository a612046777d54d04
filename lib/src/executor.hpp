// Executor: timers, deferred work and a callback thread, knowing nothing of ZooKeeper.
//
// Two threads, started by start() and joined by stop():
//  - the timer thread runs each task at its time, earliest first; defer()red
//    tasks are due at once and run in the order they were deferred;
//  - the callback thread runs post()ed callbacks one at a time, in order.
//
// Thread-safety: every method may be called from any thread, from inside a
// task or callback too.
//
// Invariants:
//  (1) An exception thrown by a task or callback, of any type, is caught and
//      logged: neither thread ever ends early, so every later timer and every
//      deferred failure callback still runs.
//  (2) stop() is idempotent. It runs the deferred tasks that are due (they
//      release waiters, e.g. failure callbacks of requests never sent),
//      including those they defer in turn for a few rounds, and drops future
//      timers; then it runs every callback already posted. After stop(),
//      post() drops its callback, and scheduled tasks never run.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <utility>

#include <spdlog/spdlog.h>
#include "clock.hpp"

namespace zklock {

class Executor {
 public:
  using Clock = std::chrono::steady_clock;  // zklock::Clock
  using Task = std::function<void()>;
  using TimerId = std::uint64_t;
  // Runs one timer task on the timer thread; `draining` is true while stop()
  // runs the due deferred tasks. The owner's hook for per-task context (the
  // client marks the thread as inside a zklock callback). Must call `task`.
  using TimerRunner = std::function<void(const Task& task, bool draining)>;

  explicit Executor(std::shared_ptr<spdlog::logger> log, TimerRunner runner = {});
  ~Executor();  // stop()
  Executor(const Executor&) = delete;
  Executor& operator=(const Executor&) = delete;

  void start();  // starts both threads; at most once
  void stop();   // see invariant (2); never from a task or a callback

  // `fn` runs on the timer thread at `when` (at once if it has passed).
  TimerId schedule_at(Clock::time_point when, Task fn);
  // Due now, after every task deferred before it: never runs inline, so the
  // caller may hold its own locks.
  TimerId defer(Task fn) { return schedule_at(Clock::time_point::min(), std::move(fn)); }
  // Drops the task if it has not started; a no-op otherwise. The task is
  // destroyed after the executor's lock is released: what it captured may
  // call back into the executor when it goes.
  void cancel(TimerId id);
  // `fn` runs on the callback thread, after every callback posted before it.
  void post(Task fn);
  // Timers and deferred tasks not yet run (diagnostics and tests).
  std::size_t pending_timers();

 private:
  void timer_loop();
  void callback_loop();
  void run_timer_task(const Task& task, bool draining) noexcept;

  std::shared_ptr<spdlog::logger> log_;
  TimerRunner runner_;

  std::mutex timer_mu_;
  std::condition_variable timer_cv_;
  using Timers = std::multimap<Clock::time_point, std::pair<TimerId, Task>>;
  Timers timers_;                                               // GUARDED_BY(timer_mu_)
  std::unordered_map<TimerId, Timers::iterator> timer_index_;  // GUARDED_BY(timer_mu_): every entry of timers_
  TimerId next_timer_ = 1;                                      // GUARDED_BY(timer_mu_)
  bool timer_stop_ = false;                                             // GUARDED_BY(timer_mu_)
  // The deadline the loop sleeps until (max: no timer; min: awake, it will
  // look at the timers before sleeping again). GUARDED_BY(timer_mu_)
  Clock::time_point sleeping_until_ = Clock::time_point::min();
  std::thread timer_thread_;

  std::mutex user_mu_;
  std::condition_variable user_cv_;
  std::deque<Task> user_queue_;  // GUARDED_BY(user_mu_)
  bool user_stop_ = false;       // GUARDED_BY(user_mu_)
  std::thread user_thread_;
};

}  // namespace zklock
