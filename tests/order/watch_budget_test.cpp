// 20,000 waiters of one lock on one Client, then every connection cut: each waiter is granted once.
//
// On a reconnect the C client re-arms all of a session's watches in one
// SetWatches request, and the server closes a connection whose request is
// longer than jute.maxbuffer (1 MB by default): the session reconnects, is
// closed again, forever, and never expires. 20,000 waiters on one session
// watch about 1.6 MB of paths. The watch budget
// (ClientOptions::watch_budget_bytes) spreads them over several sessions
// behind the Client, each under the budget, each node on the session that
// made it.
//
// Checked, through the protocol-aware fault proxy: no SetWatches request
// the client sends is longer than the budget allows; every session gets
// back; the queue drains with every waiter granted exactly once and never
// two at a time; no node is left. ZKLOCK_TEST_WATCH_BUDGET=<bytes> sets the
// budget: a budget past the server's limit (e.g. 67108864, one session for
// everything, as zklock had before) shows the failure this guards against.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "async_waiters.hpp"
#include "client_impl.hpp"  // Client::Impl::census (lib/src)
#include "fault_proxy.hpp"
#include "zk_harness.hpp"
#include "zk_server.hpp"
#include "zk_wire.hpp"
#include "zklock/fair_mutex.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;
using test::eventually;

// The server's default jute.maxbuffer: the longest packet it reads.
constexpr std::size_t kJuteMaxBuffer = 0xfffff;

TEST(WatchBudget, TwentyThousandWaitersOnOneLockSurviveACut) {
  constexpr int kWaiters = 20000;
  test::Outcomes out(kWaiters);
  test::ZkServer zk({.tick = 200ms, .max_session_timeout = 30s});
  zk.start();
  test::FaultProxy proxy(zk.port());
  const auto path = test::unique_lock_path("budget");
  Client holder_client({.connect = zk.connect_string(), .session_timeout = 20s});
  ClientOptions options{.connect = proxy.connect_string(), .session_timeout = 20s};
  if (const char* b = std::getenv("ZKLOCK_TEST_WATCH_BUDGET")) options.watch_budget_bytes = std::stoull(b);
  Client c(options);
  const auto census = [&] { return detail::ClientAccess::impl(c)->census(); };
  FairMutex holder_mutex(holder_client, path);
  Lease holder = holder_mutex.acquire({.owner = "holder"});

  FairMutex m(c, path);
  const auto queued_at = Clock::now();
  test::queue_waiters(m, out, kWaiters);
  ASSERT_TRUE(eventually([&] { return holder_client.stat(path).num_children == kWaiters + 1; }, 180s))
      << holder_client.stat(path).num_children << " nodes";
  ASSERT_TRUE(eventually([&] { return census().requests <= 2 * c.sessions(); }, 60s))
      << census().requests << " requests";
  const auto seated = c.seated_watch_bytes();
  std::string per_session;
  for (auto b : seated) {
    per_session += (per_session.empty() ? "" : ", ") + std::to_string(b);
    EXPECT_LE(b, options.watch_budget_bytes) << "a session seated more than the budget";
  }
  std::printf("[figure] watch budget: %d waiters queued in %.1f s on %zu sessions; %zu watches armed; seated "
              "bytes per session: %s (budget %zu)\n",
              kWaiters, test::ms_since(queued_at) / 1000, c.sessions(), census().watches, per_session.c_str(),
              options.watch_budget_bytes);

  // Every connection cut: each session reconnects and re-arms its watches,
  // while the holder lets the queue go.
  proxy.cut();
  const auto looping = [&] { return proxy.largest_request(test::wire::kSetWatches) > kJuteMaxBuffer; };
  const auto drain_at = Clock::now();
  holder.release();
  {
    std::unique_lock lk(out.mu);
    const auto deadline = Clock::now() + 480s;  // 157 s measured alone on two cores
    while (out.done < kWaiters && Clock::now() < deadline && !looping()) out.cv.wait_for(lk, 100ms);
    EXPECT_EQ(out.done, kWaiters) << "drain: " << out.done << " done, " << out.failed << " failed";
  }
  std::printf("[figure] watch budget: %d waiters drained in %.1f s; largest SetWatches %zu bytes (the server "
              "reads at most %zu)\n",
              kWaiters, test::ms_since(drain_at) / 1000, proxy.largest_request(test::wire::kSetWatches),
              kJuteMaxBuffer);
  EXPECT_FALSE(looping()) << "a session asked the server to re-arm more watches than its jute.maxbuffer: it "
                             "cannot reconnect";
  EXPECT_GT(proxy.largest_request(test::wire::kSetWatches), 0U) << "no session re-armed its watches";
  EXPECT_EQ(out.faults(), "");
  EXPECT_TRUE(eventually([&] { return holder_client.children(path).empty(); }, 30s));
}

// A budget of 4 KiB seats about 15 attempts per session: 60 waiters take
// four or more. Across the sessions the owner-wide rules hold (one attempt per owner
// and lock), each lease is valid on its own session, and the queue drains
// with every waiter granted once and never two at a time.
TEST(WatchBudget, WaitersSpreadOverSessionsKeepTheLocksRules) {
  constexpr int kWaiters = 60;
  test::Outcomes out(kWaiters);
  auto& zk = test::shared_server();
  const auto path = test::unique_lock_path("budget-small");
  Client holder_client({.connect = zk.connect_string()});
  Client c({.connect = zk.connect_string(), .watch_budget_bytes = 4096});
  FairMutex holder_mutex(holder_client, path);
  Lease holder = holder_mutex.acquire({.owner = "holder"});
  FairMutex m(c, path);
  test::queue_waiters(m, out, kWaiters);
  ASSERT_TRUE(eventually([&] { return holder_client.stat(path).num_children == kWaiters + 1; }, 30s));
  EXPECT_GE(c.sessions(), 4U);
  for (auto b : c.seated_watch_bytes()) EXPECT_LE(b, 4096U);
  // "w-7" already waits, on whichever session: a second request is refused.
  try {
    m.try_acquire_for(1s, {.owner = "w-7"});
    ADD_FAILURE() << "a second acquisition by a waiting owner was not refused";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::would_deadlock) << e.what();
  }
  // Another lock, on whichever session has room: valid there, released there.
  {
    FairMutex other(c, test::unique_lock_path("budget-other"));
    Lease own = other.acquire({.owner = "other"});
    EXPECT_TRUE(eventually([&] { return own.valid(); }, 10s));
  }

  holder.release();
  {
    std::unique_lock lk(out.mu);
    ASSERT_TRUE(out.cv.wait_for(lk, 60s, [&] { return out.done == kWaiters; })) << out.done << " done";
  }
  EXPECT_EQ(out.faults(), "");
  EXPECT_TRUE(eventually([&] { return holder_client.children(path).empty(); }, 10s));
  // Every seat given back once the attempts are over.
  EXPECT_TRUE(eventually([&] {
    for (auto b : c.seated_watch_bytes()) {
      if (b != 0) return false;
    }
    return true;
  }, 10s)) << [&] {
    std::string t;
    for (auto b : c.seated_watch_bytes()) t += std::to_string(b) + " ";
    return "seated bytes left per session: " + t;
  }();
}

TEST(WatchBudget, AZeroBudgetIsRefused) {
  try {
    Client c({.connect = test::shared_server().connect_string(), .watch_budget_bytes = 0});
    ADD_FAILURE() << "a budget of 0 bytes was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("watch budget"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace zklock
