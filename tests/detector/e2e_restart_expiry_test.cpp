// zklock-detector end to end, surviving ZooKeeper and its own session: a
// ZooKeeper restart (the session and the mirror's watches carry on), and
// the detector's own session expiry behind a partitioning relay (a new
// session, a re-mirror, the election re-entered, the cycles broken).
// The fixtures: e2e_fixtures.hpp.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>

#include "e2e_fixtures.hpp"
#include "fault_proxy.hpp"
#include "zk_harness.hpp"

namespace zklock::detector {
namespace {

using namespace zklock::model;
using namespace e2e;

using namespace std::chrono_literals;

// A restarted server keeps the session (its timers restart): the C client
// re-registers the mirror's watches, and a cycle formed after the restart is
// seen through them (the periodic full resync is far away).
TEST(DetectorE2E, SurvivesAZooKeeperRestart) {
  test::ZkServer server;
  server.start();
  const auto zk = server.connect_string();
  const auto root = test::unique_path("e2e-restart");
  const auto x = root + "/x", y = root + "/y";
  {
    Client setup(session(zk));
    setup.ensure_path(x, CreateMode::persistent);
    setup.ensure_path(y, CreateMode::persistent);
  }
  auto cfg = config(zk, root, "e2e-restart");
  cfg.resync_interval = 10min;
  Running run(cfg);
  ASSERT_TRUE(run.daemon().election().wait_leader(10s));
  ASSERT_TRUE(run.daemon().mirror().wait_idle(10s));
  ASSERT_EQ(run.daemon().mirror().stats().dirs, 3u);
  const auto sid = run.daemon().client().session_id();
  const auto resyncs = run.daemon().mirror().stats().resyncs;

  const auto down = Clock::now();
  server.stop();
  server.start();
  ASSERT_TRUE(run.daemon().client().wait_connected(20s));
  std::printf("[ restart  ] ZooKeeper down and back in %.3f s; detector session kept: %s\n", secs(Clock::now() - down),
              run.daemon().client().session_id() == sid ? "yes" : "no");
  EXPECT_EQ(run.daemon().client().session_id(), sid);
  EXPECT_EQ(run.daemon().mirror().stats().resyncs, resyncs) << "watches, not a resync, must carry the mirror";
  ASSERT_TRUE(run.daemon().election().wait_leader(10s));

  Client ca(session(zk)), cb(session(zk));
  Actor a(ca, "alice"), b(cb, "bob");
  auto c = cross_order(a, b, x, y);
  expect_victim(c.b_waits, c.closed, "alice -[" + y + "]-> bob -[" + x + "]-> alice",
                latency_bound(cfg.min_wait, cfg.interval), "after restart");
  expect_revoked(run, "bob", "after restart");
  b.release_all();
  expect_granted(c.a_waits, "alice");
}

// The detector's own session expires (it is partitioned away through a
// relay while ZooKeeper runs on): it opens a new session, re-mirrors the
// tree, re-enters the election, and breaks a cycle that formed while it was
// away as well as one formed afterwards.
TEST(DetectorE2E, SurvivesItsOwnSessionExpiryAndReMirrors) {
  auto& server = test::shared_server();
  const auto zk = server.connect_string();
  test::FaultProxy relay(server.port());
  const auto root = test::unique_path("e2e-expiry");
  auto cfg = config(relay.connect_string(), root, "e2e-expiry");
  cfg.session_timeout = 2s;
  cfg.resync_interval = 10min;
  Running run(cfg);
  ASSERT_TRUE(run.daemon().election().wait_leader(10s));
  const auto candidate = *run.daemon().election().candidate_node();
  Client admin(session(zk));
  admin.ensure_path(root, CreateMode::persistent);
  ASSERT_TRUE(eventually([&] { return run.daemon().mirror().stats().dirs >= 1 && run.daemon().mirror().idle(); }, 10s));

  relay.refuse(true);  // partition: refuse new connections, cut the open ones
  relay.cut();
  const auto cut = Clock::now();
  ASSERT_TRUE(eventually([&] { return !admin.try_stat(candidate); }, 15s)) << "the server never expired the detector";
  std::printf("[ expiry   ] the server expired the partitioned detector's session after %.3f s\n",
              secs(Clock::now() - cut));

  // A deadlock forms while the detector is away.
  Client c1(session(zk)), c2(session(zk));
  Actor a(c1, "alice"), b(c2, "bob");
  auto first = cross_order(a, b, root + "/x", root + "/y");

  relay.refuse(false);
  const auto healed = Clock::now();
  const auto bound = latency_bound(cfg.min_wait, cfg.interval);
  const auto away_cycle = "alice -[" + root + "/y]-> bob -[" + root + "/x]-> alice";
  ASSERT_TRUE(first.b_waits.wait(20s)) << "the cycle formed during the partition was never broken";
  EXPECT_EQ(first.b_waits.error(), Errc::deadlock_victim) << first.b_waits.message();
  EXPECT_NE(first.b_waits.message().find(away_cycle), std::string::npos) << first.b_waits.message();
  std::printf("[ latency  ] expiry: partition healed -> cycle from the partition broken in %.3f s "
              "(new session + re-mirror + min-wait already passed)\n",
              secs(first.b_waits.at() - healed));
  EXPECT_LE(first.b_waits.at() - healed, cfg.session_timeout + bound);
  EXPECT_EQ(run.daemon().client().session_epoch(), 2u);
  EXPECT_GE(run.daemon().mirror().stats().resyncs, 2u) << "a new session re-lists the tree";
  EXPECT_TRUE(run.daemon().is_leader());
  EXPECT_NE(run.daemon().election().candidate_node(), candidate);
  b.release_all();
  expect_granted(first.a_waits, "alice");
  a.keep(first.a_waits);
  a.release_all();

  // And a new cycle, on lock paths born after the new session, within the bound.
  Client c3(session(zk)), c4(session(zk));
  Actor p(c3, "carol"), q(c4, "dave");
  auto second = cross_order(p, q, root + "/p", root + "/q");
  expect_victim(second.b_waits, second.closed, "carol -[" + root + "/q]-> dave -[" + root + "/p]-> carol", bound,
                "after expiry");
  const auto revoked = run.wait_for("revoked", 2, 5s);
  ASSERT_EQ(revoked.size(), 2u);
  print_report(revoked[1], cfg, "after expiry");
  q.release_all();
  expect_granted(second.a_waits, "carol");
}

}  // namespace
}  // namespace zklock::detector
