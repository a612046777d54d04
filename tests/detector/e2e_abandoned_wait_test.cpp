// zklock-detector end to end: an abandoned wait closes no cycle. An owner
// whose timed wait gave up while its connection was cut leaves its node in
// the queue until its session expires (the delete cannot be sent); the
// detector must not count that node as a wait, or it revokes a real waiter
// for a cycle nobody is stuck in. The node data
// says how long after its creation the attempt gives up
// ("gives_up_after_ms", docs/protocol.md); past that and the detector's
// clock-skew allowance the node is an abandoned wait (docs/detector.md).
// The fixtures: e2e_fixtures.hpp.
#include <gtest/gtest.h>

#include <cstdio>
#include <string>
#include <thread>

#include "e2e_fixtures.hpp"
#include "fault_proxy.hpp"
#include "zk_harness.hpp"

namespace zklock::detector {
namespace {

using namespace e2e;
using namespace std::chrono_literals;

std::int64_t wall_ms() {
  return std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// alice holds l1 and waits for l2 with a 500 ms timeout through a relay;
// the relay goes dark, so when the timeout fires her node on l2 stays until
// her session expires. Once that wait is abandoned (its creation + 500 ms +
// the 500 ms allowance), bob, holding l2, waits for l1: the tree shows the cycle
// alice -[l2]-> bob -[l1]-> alice, but alice waits for nothing. No
// revocation may happen while her node stands; bob is granted l1 when her
// session expires.
TEST(DetectorE2E, AnAbandonedWaitOfADisconnectedOwnerClosesNoCycle) {
  auto& server = test::shared_server();
  const auto zk = server.connect_string();
  test::FaultProxy relay(server.port());
  const auto root = test::unique_path("e2e-abandoned");
  const auto l1 = root + "/l1", l2 = root + "/l2";
  auto cfg = config(zk, root, "e2e-abandoned");
  // One host: the server's clock (ctime) is the detector's, so a small
  // allowance is enough and keeps the test short.
  cfg.abandon_skew = 500ms;
  Running run(cfg);
  ASSERT_TRUE(run.daemon().election().wait_leader(10s));

  auto alice_session = session(relay.connect_string());
  alice_session.session_timeout = 8s;  // the server may cap it (maxSessionTimeout)
  Client admin(session(zk)), ca(alice_session), cb(session(zk));
  Actor a(ca, "alice"), b(cb, "bob");
  a.hold(l1);
  b.hold(l2);

  constexpr auto kGiveUp = 500ms;
  FairMutex alice_l2(ca, l2);
  Request a_waits;
  alice_l2.acquire_async(a_waits.callback(), AcquireOptions{.owner = "alice", .description = "e2e"}, kGiveUp);
  ASSERT_TRUE(eventually([&] { return admin.children(l2).size() == 2; }, 10s)) << "alice's wait never queued";
  const auto a_node = [&] {
    for (const auto& c : admin.children(l2)) {
      if (c.find(protocol::owner_key("alice")) != std::string::npos) return l2 + "/" + c;
    }
    return std::string();
  }();
  ASSERT_FALSE(a_node.empty());
  relay.blackhole(true);
  const auto cut = Clock::now();

  ASSERT_TRUE(a_waits.wait(10s)) << "alice's timed wait never gave up";
  EXPECT_EQ(a_waits.error(), Errc::timeout) << a_waits.message();
  const auto st = admin.try_stat(a_node);
  ASSERT_TRUE(st) << "alice's node went with her timeout: nothing abandoned to test";
  // The wait is abandoned once the detector's clock passes its creation +
  // the stated timeout + the allowance (the claim's precondition, a clock
  // condition: the server's ctime and this host's clock are the same clock).
  const auto abandoned_at = st->ctime + kGiveUp.count() + cfg.abandon_skew.count() + 50;
  while (wall_ms() < abandoned_at) std::this_thread::sleep_for(milliseconds(abandoned_at - wall_ms()));

  auto b_waits = b.enqueue(l1);
  const auto closed = Clock::now();
  const auto scans_before = run.daemon().metrics().scans();
  std::printf("[ abandon  ] bob's real wait queued %.3f s after alice's link went dark\n", secs(closed - cut));

  // bob is granted only when alice's session expires and takes her l1 node
  // with it; until then the cycle stands in the tree for every scan.
  ASSERT_TRUE(b_waits.wait(30s)) << "bob was never granted l1";
  const auto window = b_waits.at() - closed;
  const auto scans = run.daemon().metrics().scans() - scans_before;
  EXPECT_TRUE(b_waits.granted()) << "bob was told: " << b_waits.message();
  EXPECT_NE(b_waits.error(), Errc::deadlock_victim) << b_waits.message();
  EXPECT_EQ(run.count("revoked"), 0u) << "the detector revoked through alice's abandoned wait";
  EXPECT_FALSE(admin.try_stat(a_node)) << "bob was granted while alice's node stood?";
  std::printf("[ abandon  ] the cycle through alice's abandoned wait stood %.3f s (min-wait %.3f s, %zu scans); "
              "revocations %zu; bob %s\n",
              secs(window), secs(cfg.min_wait), static_cast<std::size_t>(scans),
              run.count("revoked"), b_waits.granted() ? "granted when alice's session expired" : "revoked");
  // The claim covers a real window: many scans ran while the cycle stood.
  EXPECT_GE(window, cfg.min_wait + 5 * cfg.interval);
  b.keep(b_waits);
  relay.blackhole(false);
}

}  // namespace
}  // namespace zklock::detector
