// zklock-detector end to end, races and leadership: a cycle of real locks
// that dissolves between the snapshot and the multi, an idle retained node
// of an owner that queued elsewhere and was cut off (no cycle), and the
// leader process killed with kill -9 while a standby takes over.
// The fixtures: e2e_fixtures.hpp.
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <thread>

#include "e2e_fixtures.hpp"
#include "fault_proxy.hpp"
#include "zk_harness.hpp"
#include "zklock/protocol/revoke.hpp"

namespace zklock::detector {
namespace {

using namespace zklock::model;
using namespace e2e;

using namespace std::chrono_literals;

// ===========================================================================
// Races

// The race, with real locks: between the snapshot and the multi, alice
// gives up x on her own (the cycle dissolves and bob is granted x). The
// multi's checks fail: nothing is revoked, the attempt is counted aborted.
TEST(DetectorE2E, ACycleOfRealLocksThatDissolvesBeforeTheMultiIsNotRevoked) {
  const auto zk = test::shared_server().connect_string();
  const auto root = test::unique_path("e2e-race");
  auto cfg = config(zk, root, "e2e-race");
  Daemon d(cfg);
  ASSERT_TRUE(d.election().wait_leader(10s));
  Client ca(session(zk)), cb(session(zk));
  Actor a(ca, "alice"), b(cb, "bob");
  auto c = cross_order(a, b, root + "/x", root + "/y");
  ASSERT_TRUE(eventually([&] { return d.mirror().stats().nodes == 4 && d.mirror().idle(); }, 10s));
  std::this_thread::sleep_until(c.closed + cfg.min_wait + 50ms);
  std::string released;
  d.before_revoke = [&](const Cycle&) {
    released = a.leases()[0].node_path();
    a.leases()[0].release();  // alice's hold on x ends: bob's wait is granted
  };
  const auto reports = d.scan_once();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].outcome, "aborted") << reports[0].detail;
  EXPECT_EQ(d.metrics().aborted(), 1u);
  EXPECT_EQ(d.metrics().revocations("revoked"), 0u);
  expect_granted(c.b_waits, "bob, once alice let go of x");
  b.keep(c.b_waits);
  EXPECT_FALSE(protocol::read_revocation_record(ca, b.leases().back().node_path()));  // bob's (ex-)waiting node
  EXPECT_FALSE(protocol::read_revocation_record(ca, released));
  b.release_all();
  expect_granted(c.a_waits, "alice");
  std::printf("[ race     ] dissolved cycle: outcome %s, aborted attempts counted %llu\n", reports[0].outcome.c_str(),
              static_cast<unsigned long long>(d.metrics().aborted()));
}

// Whether `session` holds a data watch on `path`, from the server's `wchp`
// (each watched path, then its sessions on tab-indented lines).
bool watched_by(int port, const std::string& path, std::int64_t session) {
  auto text = test::four_letter_word("127.0.0.1", port, "wchp");
  if (!text) return false;
  char id[32];
  std::snprintf(id, sizeof id, "0x%llx", static_cast<unsigned long long>(session));
  std::istringstream in(*text);
  bool under = false;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '\t') under = line == path;
    else if (under && line.find(id) != std::string::npos) return true;
  }
  return false;
}

// An idle retained node is no hold. xavier retains a, queues
// for b behind yvonne, and is then cut off (a blackhole: he can act no more
// than a paused process could) for longer than min-wait while yvonne asks
// for a. An owner releases its idle nodes before it queues anywhere, so
// yvonne is granted a, and there is no cycle to revoke.
TEST(DetectorE2E, AnIdleRetainedNodeOfAnOwnerQueuedElsewhereAndCutOffIsNoCycle) {
  const auto zk = test::shared_server().connect_string();
  const auto root = test::unique_path("e2e-retained");
  Running run(config(zk, root, "e2e-retained"));
  ASSERT_TRUE(run.daemon().election().wait_leader(10s));
  test::FaultProxy proxy(test::shared_server().port());
  auto ox = session(proxy.connect_string());
  ox.session_timeout = 10s;  // the cut must not expire it: xavier's nodes stay
  Client cx(ox), cy(session(zk));
  const auto a = root + "/a", b = root + "/b";
  FairMutex xa(cx, a, {.retain = 60s}), xb(cx, b), ya(cy, a), yb(cy, b);
  const AcquireOptions x{.owner = "xavier"}, y{.owner = "yvonne"};
  Lease first = xa.acquire(x);
  const auto idle = first.node_path();
  first.release();
  ASSERT_TRUE(cy.try_stat(idle)) << "not retained";
  Lease held = yb.acquire(y);
  Request x_waits;
  xb.acquire_async(x_waits.callback(), x);
  // Settled: waiting on his blocker's watch. The blackhole drops what he
  // sends while cut off (his validity heartbeat falls due in it), so after
  // the heal the server's next reply is out of order for his C client,
  // which drops the connection: a transient error (ZRUNTIMEINCONSISTENCY)
  // that his wait rides out like any connection loss.
  const int port = test::shared_server().port();
  ASSERT_TRUE(eventually([&] { return watched_by(port, held.node_path(), cx.session_id()); }, 5s))
      << "xavier did not queue for b";
  proxy.blackhole(true);
  Request y_asks;
  ya.acquire_async(y_asks.callback(), y);
  const auto bound = latency_bound(run.cfg().min_wait, run.cfg().interval);
  ASSERT_TRUE(y_asks.wait(bound)) << "yvonne still waits for a: " << y_asks.message();
  EXPECT_TRUE(y_asks.granted()) << y_asks.message();
  // A cycle would be revoked within the bound of yvonne's request.
  const auto revoked = run.wait_for("revoked", 1, bound);
  EXPECT_TRUE(revoked.empty()) << "revoked: " << revoked.front().text;
  EXPECT_FALSE(x_waits.done()) << x_waits.message();
  proxy.blackhole(false);
  Lease ya_lease = y_asks.take_lease();
  ya_lease.release();
  held.release();
  ASSERT_TRUE(x_waits.wait(15s)) << "xavier was never granted b";
  ASSERT_TRUE(x_waits.granted()) << x_waits.message();
  x_waits.take_lease().release();
}

// ===========================================================================
// Leader failover with real processes

TEST(DetectorE2E, KillNineTheLeaderProcessAndTheStandbyRevokesTheNextCycle) {
  const auto zk = test::shared_server().connect_string();
  const auto root = test::unique_path("e2e-ha");
  TempDir dir;
  const auto tag = std::to_string(::getpid()) + "-" + root.substr(1);
  const auto first_id = "ha-first-" + tag, second_id = "ha-second-" + tag;
  Client admin(session(zk));

  DetectorProcess first(dir.path(), "first", detector_args(zk, root, first_id));
  ASSERT_TRUE(first.wait_line({"now the leader"}, 20s)) << first.log();
  DetectorProcess second(dir.path(), "second", detector_args(zk, root, second_id));
  std::optional<std::string> second_candidate;
  ASSERT_TRUE(eventually([&] { return (second_candidate = candidate_of(admin, second_id)).has_value(); }, 20s))
      << second.log();
  ASSERT_FALSE(second.wait_line({"now the leader"}, 0ms)) << "two leaders: " << second.log();

  const auto killed = Clock::now();
  first.child().signal(SIGKILL);
  ASSERT_TRUE(first.child().wait_exit(5s));
  const auto line = second.wait_line({"now the leader"}, 15s);
  const auto takeover = Clock::now() - killed;
  ASSERT_TRUE(line) << second.log();
  std::printf("[ failover ] kill -9 of the leader -> standby leads after %.3f s (session timeout 4 s)\n",
              secs(takeover));
  EXPECT_LE(takeover, 4s + 1s);
  EXPECT_FALSE(candidate_of(admin, first_id)) << "the dead leader's node outlived its session";

  Client ca(session(zk)), cb(session(zk));
  Actor a(ca, "alice"), b(cb, "bob");
  auto c = cross_order(a, b, root + "/x", root + "/y");
  const auto bound = latency_bound(500ms, 200ms);
  expect_victim(c.b_waits, c.closed, "alice -[" + root + "/y]-> bob -[" + root + "/x]-> alice", bound, "failover");
  EXPECT_NE(c.b_waits.message().find("deadlock detector " + second_id), std::string::npos) << c.b_waits.message();
  b.release_all();
  expect_granted(c.a_waits, "alice");
  const auto revoked = second.wait_line({"outcome revoked", root}, 5s);
  ASSERT_TRUE(revoked) << second.log();
  print_logged_latency(*revoked, bound, "failover");
  EXPECT_EQ(second.child().terminate(5s).describe(), "exit 0");
  EXPECT_FALSE(candidate_of(admin, second_id)) << "SIGTERM must delete the leader node";
}

}  // namespace
}  // namespace zklock::detector
