// Retained leases that end under us, against a real ZooKeeper: the node
// deleted while idle, a re-taken holder revoked, the session closed or
// expired while retained, and a re-take while cut off (disconnected, or
// the validity bound lapsed), which is a normal acquisition.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <future>

#include "fault_proxy.hpp"
#include "zk_harness.hpp"
#include "zklock/fair_mutex.hpp"
#include "zklock/protocol/revoke.hpp"

namespace zklock {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using test::eventually;
using test::ms_since;
using test::unique_lock_path;

ClientOptions shared_opts() { return {.connect = test::shared_server().connect_string(), .session_timeout = 4s}; }

// A callback registered on one grant of a retained node belongs to that
// lease only: lease a's callback must not run when a later re-take b of the
// same node is lost, and b's runs once.
TEST(Retain, AnEarlierLeasesOnLostCallbackStaysQuietWhenAReTakeIsLost) {
  Client c(shared_opts()), admin(shared_opts());
  FairMutex m(c, unique_lock_path("retain-lost-cbs"), {.retain = 60s});
  std::atomic<int> a_calls{0}, b_calls{0};
  std::promise<LossReason> b_lost;
  Lease a = m.acquire();
  a.on_lost([&](LossReason, const std::string&) { ++a_calls; });
  a.release();
  Lease b = m.acquire();
  ASSERT_EQ(b.node_path(), a.node_path()) << "not a re-take";
  b.on_lost([&](LossReason r, const std::string&) {
    if (++b_calls == 1) b_lost.set_value(r);
  });
  ASSERT_NO_THROW(admin.remove(b.node_path()));
  auto f = b_lost.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready) << "the re-taken lease was not told";
  EXPECT_EQ(f.get(), LossReason::revoked);
  // One post runs every callback of a loss in order, so a's would have run
  // by now; and a's lease still reads as released.
  EXPECT_EQ(a_calls.load(), 0) << "a released lease's callback ran for a later grant";
  EXPECT_FALSE(a.loss_reason());
  b.release();
  EXPECT_EQ(b_calls.load(), 1);
  EXPECT_EQ(a_calls.load(), 0);
}

// Our idle node deleted by someone else (an operator, a revocation): the
// retention ends quietly and the next acquire is a normal one.
TEST(Retain, AnIdleNodeDeletedByAnotherClientFallsBackToANormalAcquire) {
  Client c(shared_opts()), admin(shared_opts());
  const auto path = unique_lock_path("retain-revoked");
  FairMutex m(c, path, {.retain = 60s});
  Lease a = m.acquire();
  const auto node = a.node_path();
  const auto ta = a.token();
  a.release();
  ASSERT_NO_THROW(admin.remove(node));
  // A read on our own session, answered after the delete: its answer comes
  // after the children watch's notification (session order), which ends
  // the retention. (Before that notification a re-take may still be
  // granted: the window of any holder whose node was just deleted.)
  EXPECT_FALSE(c.try_stat(node));
  Lease b = m.acquire();
  EXPECT_NE(b.node_path(), node);
  EXPECT_TRUE(b.valid());
  EXPECT_TRUE(b.token() > ta);
}

// A holder that re-took its retained node is revoked: the record names the
// node by its first lease's token (its czxid; the re-take's lease adds its
// ordinal), and the lease hears of it.
TEST(Retain, ARevokedReTakenHolderIsRecordedWithItsNodesCzxid) {
  Client c(shared_opts()), admin(shared_opts());
  const auto path = unique_lock_path("retain-revoke-token");
  FairMutex m(c, path, {.retain = 60s});
  Lease a = m.acquire();
  const auto ta = a.token();
  a.release();
  Lease b = m.acquire();
  ASSERT_EQ(b.node_path(), a.node_path()) << "not a re-take";
  ASSERT_TRUE(b.token() > ta);
  ASSERT_EQ(b.token().czxid(), ta.czxid());
  std::promise<LossReason> lost;
  b.on_lost([&lost](LossReason r, const std::string&) { lost.set_value(r); });

  protocol::RevocationRequest req;
  req.victims.push_back({b.node_path(), c.default_owner(), 0});
  req.record.policy = "operator";
  req.record.mode = "wait";
  req.record.reason = "test";
  const auto r = revoke(admin, req);
  ASSERT_EQ(r.outcome, protocol::RevokeOutcome::revoked) << r.detail;
  const auto rec = protocol::read_revocation_record(admin, b.node_path());
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->victim_token, ta.str()) << "the node's first lease: <ensemble-id>:<czxid>";
  auto f = lost.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready) << "the re-taken lease was not told";
  EXPECT_EQ(f.get(), LossReason::revoked);
}

// The session ends while the node is retained idle: nothing is reported
// (no lease exists), the node goes with the session, and another client is
// granted.
TEST(Retain, ClosingTheSessionWhileRetainedFreesTheLock) {
  const auto path = unique_lock_path("retain-close");
  Client c2(shared_opts());
  {
    Client c1(shared_opts());
    FairMutex m1(c1, path, {.retain = 60s});
    Lease a = m1.acquire();
    a.release();
    ASSERT_EQ(c2.children(path).size(), 1u);
  }  // the mutex, then the client: the retention ends, the session closes
  FairMutex m2(c2, path);
  auto b = m2.try_acquire_for(5s);
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->valid());
}

// The server expires the session while the node is retained idle: the
// client is cut off (a blackhole, so it cannot see the waiter queue and
// release) for longer than its timeout. The waiter is granted once the
// server expires the session, nothing is reported to the released lease,
// and when the link is back the retaining mutex's next acquire is a normal
// one on the new session, with a larger token than the waiter's.
TEST(Retain, ServerSideExpiryWhileRetainedFreesTheLockQuietly) {
  test::FaultProxy proxy(test::shared_server().port());
  Client c1({.connect = proxy.connect_string(), .session_timeout = 2s});
  Client c2(shared_opts());
  std::atomic<bool> c1_lost{false};
  c1.add_listener([&](ConnectionState s) {
    if (s == ConnectionState::lost) c1_lost = true;
  });
  const auto path = unique_lock_path("retain-expiry");
  FairMutex m1(c1, path, {.retain = 60s});
  FairMutex m2(c2, path);
  std::atomic<int> reported{0};
  Lease a = m1.acquire();
  a.on_lost([&](LossReason, const std::string&) { ++reported; });
  const auto node = a.node_path();
  const auto ta = a.token();
  a.release();
  ASSERT_TRUE(c2.try_stat(node)) << "the released node is retained";

  proxy.blackhole(true);
  const auto cut = Clock::now();
  auto b = m2.try_acquire_for(30s);
  ASSERT_TRUE(b) << "the waiter was not granted after the retaining session's expiry";
  const auto waited = ms_since(cut);
  EXPECT_TRUE(b->valid());
  EXPECT_TRUE(b->token() > ta);
  EXPECT_FALSE(c2.try_stat(node)) << "the retained node went with the session";
  EXPECT_GE(waited, 1000.0) << "granted before the server could have expired a 2 s session";

  proxy.blackhole(false);
  ASSERT_TRUE(eventually([&] { return c1_lost.load() && c1.session_epoch() == 2 && c1.connected(); }, 30s))
      << "the cut-off client never learned of its expiry and reconnected";
  const auto tb = b->token();
  b->release();
  auto a2 = m1.try_acquire_for(10s);
  ASSERT_TRUE(a2);
  EXPECT_NE(a2->node_path(), node);
  EXPECT_TRUE(a2->token() > tb);
  EXPECT_EQ(reported.load(), 0) << "a released lease heard of the expiry";
}

// A re-take while cut off is a normal acquisition, with the request's
// whole timeout: the retention ends (its release goes out once the link is
// back) and the next grant is a new node with a larger token. `lapse`:
// cut off silently (a blackhole) until the validity bound has lapsed (the
// C client gives up on the connection at two thirds of the session
// timeout, before the bound lapses, so it is disconnected by then too; a
// lapse the client has not noticed is the frozen retainer of
// tests/loss/frozen_retainer_test.cpp); otherwise refused reconnects
// after a cut, so the client is disconnected at once.
void expect_cut_off_retake_is_normal(bool lapse) {
  test::FaultProxy proxy(test::shared_server().port());
  Client c({.connect = proxy.connect_string(), .session_timeout = 6s});
  FairMutex m(c, unique_lock_path(lapse ? "retain-lapsed" : "retain-disconnected"), {.retain = 60s});
  Lease a = m.acquire();
  const auto node = a.node_path();
  const auto ta = a.token();
  a.release();
  if (lapse) {
    proxy.blackhole(true);
    ASSERT_TRUE(eventually([&] { return Clock::now() >= c.valid_until(); }, 10s)) << "the bound never lapsed";
  } else {
    proxy.refuse(true);
    proxy.cut();
    ASSERT_TRUE(eventually([&] { return !c.connected(); }, 10s)) << "still connected after the cut";
  }
  const bool connected = c.connected();
  const auto t0 = Clock::now();
  auto r = m.try_acquire_for(500ms);
  const auto took = ms_since(t0);
  std::printf("[ retain   ] re-take while %s (connected=%d): %s after %.0f ms\n",
              lapse ? "the bound has lapsed" : "disconnected", connected ? 1 : 0, r ? "granted" : "not granted", took);
  EXPECT_FALSE(r) << "re-taken locally while cut off";
  EXPECT_GE(took, 400.0) << "not a normal acquisition with the whole timeout";
  EXPECT_LT(took, 3000.0);
  proxy.blackhole(false);
  proxy.refuse(false);
  // A long cut expires the session: an acquisition pending then fails with
  // session_expired, and the next one runs on the new session.
  ASSERT_TRUE(eventually([&] { return c.connected(); }, 20s)) << "never reconnected";
  std::optional<Lease> b;
  for (int i = 0; i < 2 && !b; ++i) {
    try {
      b = m.try_acquire_for(20s);
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::session_expired) << e.what();
    }
  }
  ASSERT_TRUE(b) << "no grant once the link was back";
  EXPECT_NE(b->node_path(), node) << "the retention outlived the cut";
  EXPECT_TRUE(b->valid());
  EXPECT_TRUE(b->token() > ta);
}

TEST(Retain, AReTakeWhileDisconnectedIsANormalAcquisition) { expect_cut_off_retake_is_normal(false); }
TEST(Retain, AReTakeAfterTheBoundLapsedIsANormalAcquisition) { expect_cut_off_retake_is_normal(true); }

}  // namespace
}  // namespace zklock
