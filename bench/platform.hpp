// The `platform` scenario's parts shared by its coordinator (platform.cpp),
// its worker processes (platform_worker.cpp) and the hot locks
// (platform_hot.cpp). docs/performance.md, "The seed's platform", explains
// the shape and every figure.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "measure.hpp"
#include "zklock/observer.hpp"

namespace zklock::bench {

// What a worker's locks report, counted (atomics only: any thread).
struct LockCounts : LockObserver {
  std::atomic<std::uint64_t> granted_retained{0}, granted_fresh{0}, lost_n{0}, lapses{0}, failed_n{0};
  void granted(std::string_view, Duration, bool retained) override {
    (retained ? granted_retained : granted_fresh).fetch_add(1, std::memory_order_relaxed);
  }
  void failed(std::string_view, Duration, Errc) override { failed_n.fetch_add(1, std::memory_order_relaxed); }
  void lost(std::string_view, LossReason) override { lost_n.fetch_add(1, std::memory_order_relaxed); }
  void validity_lapsed(std::int64_t) override { lapses.fetch_add(1, std::memory_order_relaxed); }
  nlohmann::json snapshot() const {
    return {{"granted_retained", granted_retained.load()}, {"granted_fresh", granted_fresh.load()},
            {"lost", lost_n.load()}, {"lapses", lapses.load()}, {"failed", failed_n.load()}};
  }
};
// b - a, key by key.
nlohmann::json count_diff(const nlohmann::json& a, const nlohmann::json& b);

// `locks` hot lock paths under root/hot, `contenders` contenders each spread
// over `sessions` Clients, each holder working `work_ms` in the lock. Every
// contender re-queues right after its release, so each lock always has
// `contenders - 1` waiters and every grant is a hand-off.
class HotLocks {
 public:
  HotLocks(const std::string& connect, const std::string& root, int sessions, int locks, int contenders, int work_ms);
  ~HotLocks();
  HotLocks(const HotLocks&) = delete;
  HotLocks& operator=(const HotLocks&) = delete;
  // Every contender queues; the first grant of each lock is held until the
  // next window starts. Returns once every lock has its holder.
  void queue();
  // Cycles from `start` to `end` (queueing first if not queued), then waits
  // for the queues to drain. Hand-offs are measured from a release to the
  // next grant of the same lock, for grants inside [measure, end).
  nlohmann::json window(Clock::time_point start, Clock::time_point measure, Clock::time_point end);

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

// `zklock-bench platform-worker ...` (argv[0] is "platform-worker").
int platform_worker_main(int argc, char** argv);

}  // namespace zklock::bench
