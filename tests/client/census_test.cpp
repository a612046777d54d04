// Nothing a client holds grows with use. A service takes the same locks for
// months: every watch callback, request record and timer an acquisition
// leaves behind must go once it is over, or a busy process slowly fills
// (the C client keeps a callback per watching call until its watch fires;
// the executor keeps a task per timer until it runs). Counted inside the
// client (Client::Impl::census), against a real ZooKeeper.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <optional>
#include <string>
#include <thread>

#include "client_impl.hpp"  // Client::Impl::census (lib/src)
#include "fault_proxy.hpp"
#include "zk_harness.hpp"
#include "zklock/fair_mutex.hpp"
#include "zklock/shared_mutex.hpp"

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

// What an idle client holds: its heartbeat and validity-check timers, and
// at most the heartbeat's two requests (sync, read) in flight. Fixed rather
// than sampled: a sample can fall between a timer running and its next
// being scheduled.
constexpr Census kIdle{.watches = 0, .requests = 2, .timers = 2};

bool within(const Census& c, const Census& bound) {
  return c.watches <= bound.watches && c.requests <= bound.requests && c.timers <= bound.timers;
}

// Waits (bounded) until `c` holds no more than `bound`, and says so.
::testing::AssertionResult back_to(const Client& c, const Census& bound, std::chrono::milliseconds within_ms) {
  if (eventually([&] { return within(census(c), bound); }, within_ms)) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "holds " << show(census(c)) << "; idle it holds at most " << show(bound);
}

// Free-lock cycles through a plain mutex: each release deletes the node;
// once its answer is in, nothing of the attempt stays (its keep-alive timer
// used to stay a session timeout, and fire: a timer-thread wake per release).
TEST(Census, PlainCyclesLeaveNothingBehind) {
  Client c(opts());
  ASSERT_TRUE(back_to(c, kIdle, 2s)) << "a fresh client";
  FairMutex m(c, unique_lock_path("census-plain"));
  constexpr int kCycles = 200;
  Census peak;
  for (int i = 0; i < kCycles; ++i) {
    m.acquire().release();
    const auto now = census(c);
    peak.timers = std::max(peak.timers, now.timers);
    peak.watches = std::max(peak.watches, now.watches);
  }
  std::printf("[ census   ] idle: %s; most during %d cycles: %zu watches, %zu timers\n", show(kIdle).c_str(), kCycles,
              peak.watches, peak.timers);
  EXPECT_LT(peak.timers, kIdle.timers + 10u) << "timers pile up while cycling";
  EXPECT_TRUE(back_to(c, kIdle, 2s));
}

// Re-takes of a retained node: one children watch for all of them, the
// retain timer replaced, not added to, on each release, and one timer for
// the node's next confirming listing (which sets no watch).
TEST(Census, RetainedReTakesLeaveNothingBehind) {
  Client c(opts());
  ASSERT_TRUE(back_to(c, kIdle, 2s)) << "a fresh client";
  std::optional<FairMutex> m;
  m.emplace(c, unique_lock_path("census-retain"), MutexOptions{.retain = 60s});
  m->acquire().release();
  const auto retained = census(c);
  for (int i = 0; i < 300; ++i) m->acquire().release();
  const auto after = census(c);
  std::printf("[ census   ] retained: %s after the first release, %s after 300 re-takes\n", show(retained).c_str(),
              show(after).c_str());
  // The idle client's, plus the children watch, the retain timer and the
  // confirmation's.
  EXPECT_TRUE(within(after, Census{.watches = 1, .requests = kIdle.requests, .timers = kIdle.timers + 2}))
      << show(after);
  m.reset();  // ends the retention: the node is released for real
  EXPECT_TRUE(back_to(c, kIdle, 2s));
}

// Hand-offs between two clients, each waiting on the other's node: the
// waiter's watches fire or are answered, and every attempt goes.
TEST(Census, HandOffsLeaveNothingBehind) {
  Client a(opts()), b(opts());
  const auto path = unique_lock_path("census-handoff");
  FairMutex ma(a, path), mb(b, path);
  constexpr int kRounds = 50;
  std::thread other([&] {
    for (int i = 0; i < kRounds; ++i) mb.acquire().release();
  });
  for (int i = 0; i < kRounds; ++i) ma.acquire().release();
  other.join();
  EXPECT_TRUE(back_to(a, kIdle, 2s));
  EXPECT_TRUE(back_to(b, kIdle, 2s));
}

// A waiter that gives up while the holder stays: its node goes, and so must
// its watch on the holder's node, or a service that polls a long-held lock
// with try_acquire_for piles up one callback per try until the holder goes.
TEST(Census, AbandonedWaitsLeaveNothingBehind) {
  Client holder(opts()), c(opts());
  const auto path = unique_lock_path("census-abandon");
  FairMutex mh(holder, path), m(c, path);
  Lease held = mh.acquire();
  ASSERT_TRUE(back_to(c, kIdle, 2s)) << "a fresh client";
  constexpr int kTries = 60;
  // Timeouts from 0 to 2 ms end some waits while the watch's read is still
  // unanswered (its answer then takes the watch back); 20 ms ones after.
  for (int i = 0; i < kTries; ++i) {
    ASSERT_FALSE(m.try_acquire_for(i % 4 == 3 ? 20ms : std::chrono::milliseconds(i % 4)));
  }
  std::printf("[ census   ] after %d abandoned waits on a held lock: %s (idle: %s)\n", kTries,
              show(census(c)).c_str(), show(kIdle).c_str());
  EXPECT_TRUE(back_to(c, kIdle, 2s));
  held.release();
  EXPECT_TRUE(back_to(c, kIdle, 2s));
}

// The case above that timing alone cannot pin down: the waiter gives up
// while its watch's read on the holder's node is still unanswered. A proxy
// holds that getData (and everything after it on the connection) past the
// waiter's deadline, then lets it go: the answer arrives with the watch set
// for an attempt that has ended, and must take it back at once rather than
// leave the callback until the holder goes.
TEST(Census, AWaitAbandonedBeforeItsWatchIsAnsweredTakesTheWatchBack) {
  test::FaultProxy proxy(test::shared_server().port());
  Client holder(opts()), c({.connect = proxy.connect_string(), .session_timeout = 4s});
  const auto path = unique_lock_path("census-held-read");
  FairMutex mh(holder, path), m(c, path);
  Lease held = mh.acquire();
  const auto children = holder.children(path);
  ASSERT_EQ(children.size(), 1u);
  ASSERT_TRUE(back_to(c, kIdle, 2s)) << "a fresh client";
  proxy.hold_on_request(path + "/" + children[0], 4);  // getData on the holder's node
  EXPECT_FALSE(m.try_acquire_for(300ms));
  ASSERT_EQ(proxy.request_holds(), 1u) << "the waiter never read the holder's node";
  proxy.release_held();
  std::printf("[ census   ] after a wait abandoned with its watch's read held: %s (idle: %s)\n",
              show(census(c)).c_str(), show(kIdle).c_str());
  EXPECT_TRUE(back_to(c, kIdle, 2s)) << "the watch set by the late answer stayed";
  held.release();
  EXPECT_TRUE(back_to(c, kIdle, 2s));
}

// Requests the C client refuses (a relative path): each `done` runs once,
// on the timer thread, with the refusal; the watches they would have set
// and their contexts go with them (async_op.hpp: a refused request is
// unlinked and freed at once).
TEST(Census, RefusedRequestsFailOnceAndLeaveNothingBehind) {
  Client c(opts());
  ASSERT_TRUE(back_to(c, kIdle, 2s)) << "a fresh client";
  constexpr int kEach = 50;
  std::atomic<int> refused{0}, other{0}, watch_fired{0};
  const auto count = [&](Status st) { ++(st.is(Errc::bad_arguments) ? refused : other); };
  for (int i = 0; i < kEach; ++i) {
    c.stat_async("relative", [&](const WatchEvent&) { ++watch_fired; }, [&](Status st, const Stat&) { count(st); });
    c.children_async("relative", [&](const WatchEvent&) { ++watch_fired; },
                     [&](Status st, std::vector<std::string>) { count(st); });
    c.set_data_async("relative", "x", -1, [&](Status st, const Stat&) { count(st); });
  }
  ASSERT_TRUE(eventually([&] { return refused.load() + other.load() == 3 * kEach; }, 5s))
      << refused.load() + other.load() << " of " << 3 * kEach << " callbacks ran";
  EXPECT_EQ(refused.load(), 3 * kEach);
  EXPECT_EQ(watch_fired.load(), 0);
  EXPECT_TRUE(back_to(c, kIdle, 2s));
}

// Readers and writers through FairSharedMutex: the same.
TEST(Census, SharedCyclesLeaveNothingBehind) {
  Client a(opts()), b(opts());
  const auto path = unique_lock_path("census-shared");
  FairSharedMutex ma(a, path), mb(b, path);
  std::thread other([&] {
    for (int i = 0; i < 40; ++i) (i % 3 ? mb.acquire_shared() : mb.acquire()).release();
  });
  for (int i = 0; i < 40; ++i) (i % 2 ? ma.acquire_shared() : ma.acquire()).release();
  other.join();
  EXPECT_TRUE(back_to(a, kIdle, 2s));
  EXPECT_TRUE(back_to(b, kIdle, 2s));
}

}  // namespace
}  // namespace zklock
