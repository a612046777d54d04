// zklock-detector end to end: no revocation under heavy, non-deadlocking
// contention of real locks taken in one global order.
//
// The run lasts ZKLOCK_DETECTOR_SOAK_SECONDS (default 20; set 60 for the full
// acceptance run, at most 60). 20 s in CI: the run saturates the two cores
// it shares with the other integration binaries, whose own timing bounds
// suffer, and 20 s already makes thousands of hand-offs with waits past
// min-wait. The fixtures: e2e_fixtures.hpp.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include "e2e_fixtures.hpp"
#include "zk_harness.hpp"

namespace zklock::detector {
namespace {

using namespace zklock::model;
using namespace e2e;

using namespace std::chrono_literals;

TEST(DetectorE2E, NoRevocationUnderHeavyContentionInOneGlobalOrder) {
  int seconds = 20;
  if (const char* e = std::getenv("ZKLOCK_DETECTOR_SOAK_SECONDS")) seconds = std::clamp(std::atoi(e), 1, 60);
  const auto zk = test::shared_server().connect_string();
  const auto root = test::unique_path("e2e-soak");
  auto cfg = config(zk, root, "e2e-soak");
  cfg.min_wait = 50ms;
  cfg.interval = 50ms;
  Running run(cfg);
  ASSERT_TRUE(run.daemon().election().wait_leader(10s));

  constexpr int kSessions = 4, kThreadsPerSession = 2, kLocks = 3;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kSessions; ++i) clients.push_back(std::make_unique<Client>(session(zk)));
  std::vector<std::string> locks;
  for (int i = 0; i < kLocks; ++i) locks.push_back(root + "/l" + std::to_string(i));

  std::atomic<std::uint64_t> rounds{0}, acquisitions{0}, long_waits{0}, victims{0}, other_errors{0};
  std::atomic<std::int64_t> longest_wait_us{0};
  std::mutex err_mu;
  std::map<std::string, std::size_t> errors;
  const auto end = Clock::now() + std::chrono::seconds(seconds);
  std::vector<std::jthread> workers;
  for (int s = 0; s < kSessions; ++s) {
    for (int t = 0; t < kThreadsPerSession; ++t) {
      workers.emplace_back([&, s, t](std::stop_token stop) {
        Client& client = *clients[static_cast<std::size_t>(s)];
        const auto owner = "worker-" + std::to_string(s) + "-" + std::to_string(t);
        std::mt19937 rng(static_cast<unsigned>(s * 100 + t));
        std::vector<FairMutex> mutexes;
        for (const auto& l : locks) mutexes.emplace_back(client, l);
        while (Clock::now() < end && !stop.stop_requested()) {
          const unsigned mask = 1 + rng() % ((1u << kLocks) - 1);
          std::vector<Lease> held;
          try {
            for (int i = 0; i < kLocks; ++i) {  // the global order: l0 < l1 < l2
              if (!(mask & (1u << i))) continue;
              const auto asked = Clock::now();
              held.push_back(mutexes[static_cast<std::size_t>(i)].acquire(stop, {.owner = owner}));
              const auto waited = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - asked);
              ++acquisitions;
              if (waited > cfg.min_wait) ++long_waits;
              auto prev = longest_wait_us.load();
              while (waited.count() > prev && !longest_wait_us.compare_exchange_weak(prev, waited.count())) {
              }
            }
            std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));  // the critical section
            ++rounds;
          } catch (const Error& e) {
            if (e.code() == Errc::cancelled) break;
            (e.code() == Errc::deadlock_victim ? victims : other_errors)++;
            std::lock_guard lk(err_mu);
            ++errors[std::string(errc_name(e.code())) + ": " + e.what()];
          }
          for (auto it = held.rbegin(); it != held.rend(); ++it) it->release();
        }
      });
    }
  }
  for (auto& w : workers) w.join();

  const auto& m = run.daemon().metrics();
  const auto outcomes = run.outcomes();
  std::printf(
      "[ soak     ] %d s, %d sessions x %d owners, %d locks, min-wait %lld ms, interval %lld ms:\n"
      "[ soak     ] %llu rounds, %llu acquisitions (%.0f/s), %llu waits longer than min-wait, longest wait %.3f s\n"
      "[ soak     ] detector: %llu scans, %llu cycles detected, revocations: revoked %llu, aborted %llu, failed %llu; "
      "victims %llu, other errors %llu\n",
      seconds, kSessions, kThreadsPerSession, kLocks, static_cast<long long>(cfg.min_wait.count()),
      static_cast<long long>(cfg.interval.count()), static_cast<unsigned long long>(rounds.load()),
      static_cast<unsigned long long>(acquisitions.load()), static_cast<double>(acquisitions.load()) / seconds,
      static_cast<unsigned long long>(long_waits.load()), static_cast<double>(longest_wait_us.load()) / 1e6,
      static_cast<unsigned long long>(m.scans()), static_cast<unsigned long long>(m.cycles_detected()),
      static_cast<unsigned long long>(m.revocations("revoked")), static_cast<unsigned long long>(m.aborted()),
      static_cast<unsigned long long>(m.revocations("failed")), static_cast<unsigned long long>(victims.load()),
      static_cast<unsigned long long>(other_errors.load()));
  for (const auto& [what, n] : errors) std::printf("[ soak     ] error x%zu: %s\n", n, what.c_str());
  EXPECT_EQ(m.revocations("revoked"), 0u);
  EXPECT_EQ(victims.load(), 0u);
  EXPECT_EQ(other_errors.load(), 0u);
  EXPECT_EQ(outcomes.count("revoked"), 0u);
  EXPECT_GT(rounds.load(), static_cast<std::uint64_t>(seconds) * 20) << "too little contention to mean anything";
  EXPECT_GT(m.scans(), static_cast<std::uint64_t>(seconds) * 10);
}

}  // namespace
}  // namespace zklock::detector
