// What several scenarios of scenarios.hpp share (scenario_support.cpp): a
// bounded latch, the session timeout, and zklock's client options.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>

#include "measure.hpp"
#include "zklock/client.hpp"

namespace zklock::bench {

// Counts down to zero; waits are bounded.
class Latch {
 public:
  explicit Latch(std::int64_t n) : left_(n) {}
  void count_down() {
    std::lock_guard lk(mu_);
    if (--left_ <= 0) cv_.notify_all();
  }
  bool wait_for(std::chrono::milliseconds limit) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, limit, [&] { return left_ <= 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::int64_t left_;  // GUARDED_BY(mu_)
};

// Long enough that the floor's listing storm while 5,000 waiters queue (each
// lists every node ahead of it) does not time connections out.
inline constexpr std::chrono::milliseconds kSessionTimeout{30'000};

// kSessionTimeout on env.connect; resolution_delay stays at its 30 s default, like the floor.
ClientOptions client_options(const Env& env);

}  // namespace zklock::bench
