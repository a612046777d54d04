// Nothing a client holds grows with use. A service takes the same locks for
// months: every watch callback, request record and timer an acquisition
// leaves behind must go once it is over, or a busy process slowly fills
// (the C client keeps a callback per watching call until its watch fires;
// the executor keeps a task per timer until it runs). Counted inside the
// client (Client::Impl::census), against a real ZooKeeper.
#include <gtest/gtest.h>

#include <cstdio>
#include <optional>
#include <string>
#include <thread>

#include "client_impl.hpp"  // Client::Impl::census (lib/src)
#include "zk_harness.hpp"
#include "zklock/fair_mutex.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;
using test::eventually;
using test::unique_lock_path;
using Census = Client::Impl::Census;

// Session timeout 4 s: a timer kept "for a session timeout" would outlive
// the 2 s the tests below allow for things to settle.
ClientOptions opts() { return {.connect = test::shared_server().connect_string(), .session_timeout = 4s}; }

Census census(const Client& c) { return detail::ClientAccess::impl(c)->census(); }

std::string show(const Census& c) {
  return std::to_string(c.watches) + " watches, " + std::to_string(c.requests) + " requests, " +
         std::to_string(c.timers) + " timers";
}

// An idle client's own: its heartbeat and validity timers, nothing else.
// Waits until `c` holds no more than `idle` did (bounded), and says so.
::testing::AssertionResult back_to(const Client& c, const Census& idle, std::chrono::milliseconds within) {
  const bool ok = eventually(
      [&] {
        const auto now = census(c);
        return now.watches <= idle.watches && now.requests <= idle.requests && now.timers <= idle.timers;
      },
      within);
  if (ok) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "holds " << show(census(c)) << "; idle it held " << show(idle);
}

// Free-lock cycles through a plain mutex: each release deletes the node;
// once its answer is in, nothing of the attempt stays (its keep-alive timer
// used to stay a session timeout, and fire: a timer-thread wake per release).
TEST(Census, PlainCyclesLeaveNothingBehind) {
  Client c(opts());
  const auto idle = census(c);
  FairMutex m(c, unique_lock_path("census-plain"));
  constexpr int kCycles = 200;
  Census peak;
  for (int i = 0; i < kCycles; ++i) {
    m.acquire().release();
    const auto now = census(c);
    peak.timers = std::max(peak.timers, now.timers);
    peak.watches = std::max(peak.watches, now.watches);
  }
  std::printf("[ census   ] idle: %s; most during %d cycles: %zu watches, %zu timers\n", show(idle).c_str(), kCycles,
              peak.watches, peak.timers);
  EXPECT_LT(peak.timers, idle.timers + 10u) << "timers pile up while cycling";
  EXPECT_TRUE(back_to(c, idle, 2s));
}

// Re-takes of a retained node: one children watch for all of them, and the
// retain timer replaced, not added to, on each release.
TEST(Census, RetainedReTakesLeaveNothingBehind) {
  Client c(opts());
  const auto idle = census(c);
  std::optional<FairMutex> m;
  m.emplace(c, unique_lock_path("census-retain"), MutexOptions{.retain = 60s});
  m->acquire().release();
  const auto retained = census(c);
  for (int i = 0; i < 300; ++i) m->acquire().release();
  const auto after = census(c);
  std::printf("[ census   ] retained: %s after the first release, %s after 300 re-takes\n", show(retained).c_str(),
              show(after).c_str());
  EXPECT_LE(after.watches, retained.watches);
  EXPECT_LE(after.timers, retained.timers);
  m.reset();  // ends the retention: the node is released for real
  EXPECT_TRUE(back_to(c, idle, 2s));
}

// Hand-offs between two clients, each waiting on the other's node: the
// waiter's watches fire or are answered, and every attempt goes.
TEST(Census, HandOffsLeaveNothingBehind) {
  Client a(opts()), b(opts());
  const auto idle_a = census(a), idle_b = census(b);
  const auto path = unique_lock_path("census-handoff");
  FairMutex ma(a, path), mb(b, path);
  constexpr int kRounds = 50;
  std::thread other([&] {
    for (int i = 0; i < kRounds; ++i) mb.acquire().release();
  });
  for (int i = 0; i < kRounds; ++i) ma.acquire().release();
  other.join();
  EXPECT_TRUE(back_to(a, idle_a, 2s));
  EXPECT_TRUE(back_to(b, idle_b, 2s));
}

}  // namespace
}  // namespace zklock
