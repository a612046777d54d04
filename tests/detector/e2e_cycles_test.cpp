// zklock-detector end to end: cycles of real FairMutex / FairSharedMutex
// locks and their revocation, by the zklock-detector binary in a child
// process or the detector in-process (Daemon), against a real ZooKeeper
// server: two owners in opposite orders, each policy, a 3-cycle, a 2-cycle
// and a self-loop in one scan, a soft read-write edge, --mode all, and the
// pruning of revocation records. The fixtures (owners, latency checks, the
// binary): e2e_fixtures.hpp.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <deque>
#include <future>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "e2e_fixtures.hpp"
#include "zk_harness.hpp"
#include "zklock/path.hpp"
#include "zklock/protocol/node_name.hpp"
#include "zklock/protocol/revoke.hpp"

namespace zklock::detector {
namespace {

using namespace zklock::model;
using namespace e2e;

using namespace std::chrono_literals;

// ===========================================================================
// Real locks, opposite orders

TEST(DetectorE2E, TwoOwnersTakingRealLocksInOppositeOrdersTheBinaryRevokesTheYoungest) {
  const auto zk = test::shared_server().connect_string();
  const auto root = test::unique_path("e2e-pair");
  TempDir dir;
  const auto id = "e2e-pair-detector-" + std::to_string(::getpid());
  DetectorProcess det(dir.path(), "detector", detector_args(zk, root, id));
  ASSERT_TRUE(det.wait_line({"now the leader"}, 20s)) << det.log();

  Client ca(session(zk)), cb(session(zk));
  Actor a(ca, "alice"), b(cb, "bob");
  const auto x = root + "/x", y = root + "/y";
  auto c = cross_order(a, b, x, y);

  const auto bound = latency_bound(500ms, 200ms);
  expect_victim(c.b_waits, c.closed, "alice -[" + y + "]-> bob -[" + x + "]-> alice", bound, "pair (binary)");
  EXPECT_NE(c.b_waits.message().find("deadlock detector " + id), std::string::npos) << c.b_waits.message();
  EXPECT_FALSE(c.a_waits.done()) << "alice must still wait for y while bob holds it: " << c.a_waits.message();
  b.release_all();  // the victim backs off
  expect_granted(c.a_waits, "alice, after bob backed off");
  a.keep(c.a_waits);

  const auto line = det.wait_line({"outcome revoked", root}, 5s);
  ASSERT_TRUE(line) << det.log();
  EXPECT_NE(line->find("victim bob"), std::string::npos) << *line;
  print_logged_latency(*line, bound, "pair (binary)");
  EXPECT_EQ(det.child().terminate(5s).describe(), "exit 0");
}

TEST(DetectorE2E, EachPolicyRevokesTheExpectedRealOwner) {
  const auto zk = test::shared_server().connect_string();
  struct Case {
    Policy policy;
    bool alice_is_victim;
  };
  // alice: priority -2, holds one extra lock, the older wait. bob: priority 4, the younger wait.
  for (const auto& k : {Case{Policy::youngest, false}, Case{Policy::oldest, true}, Case{Policy::fewest_held, false},
                        Case{Policy::most_held, true}, Case{Policy::lowest_priority, true}}) {
    const std::string name(policy_name(k.policy));
    SCOPED_TRACE(name);
    const auto root = test::unique_path("e2e-policy");
    auto cfg = config(zk, root, "e2e-policy");
    cfg.policy.policy = k.policy;
    Running run(cfg);
    ASSERT_TRUE(run.daemon().election().wait_leader(10s));
    Client ca(session(zk)), cb(session(zk));
    Actor a(ca, "alice", -2), b(cb, "bob", 4);
    a.hold(root + "/extra");
    auto c = cross_order(a, b, root + "/x", root + "/y");
    const auto cycle = "alice -[" + root + "/y]-> bob -[" + root + "/x]-> alice";
    const auto bound = latency_bound(cfg.min_wait, cfg.interval);
    auto& victim_wait = k.alice_is_victim ? c.a_waits : c.b_waits;
    auto& other_wait = k.alice_is_victim ? c.b_waits : c.a_waits;
    expect_victim(victim_wait, c.closed, cycle, bound, "policy " + name);
    expect_revoked(run, k.alice_is_victim ? "alice" : "bob", "policy " + name);
    (k.alice_is_victim ? a : b).release_all();
    expect_granted(other_wait, "policy " + name + ": the survivor");
  }
}

// A 3-cycle, a disjoint 2-cycle and a self-loop (one owner id on two
// sessions: the re-entry check is per Client, as it would be across two
// processes), all of real locks, broken in one scan.
TEST(DetectorE2E, ThreeCycleTwoCycleAndSelfLoopOfRealLocksBrokenInOneScan) {
  const auto zk = test::shared_server().connect_string();
  const auto root = test::unique_path("e2e-many");
  auto l = [&](const char* name) { return root + "/" + name; };
  auto cfg = config(zk, root, "e2e-many");
  Daemon d(cfg);  // scanned by hand: one scan must see all three
  ASSERT_TRUE(d.election().wait_leader(10s));
  std::deque<Client> clients;
  auto actor = [&](std::deque<Actor>& out, const std::string& owner) -> Actor& {
    return out.emplace_back(clients.emplace_back(session(zk)), owner);
  };
  std::deque<Actor> actors;
  Actor &a = actor(actors, "A"), &b = actor(actors, "B"), &c = actor(actors, "C");
  Actor &p = actor(actors, "P"), &q = actor(actors, "Q");
  Actor &s1 = actor(actors, "S"), &s2 = actor(actors, "S");
  a.hold(l("a"));
  b.hold(l("b"));
  c.hold(l("c"));
  auto a_waits = a.enqueue(l("b"));
  auto b_waits = b.enqueue(l("c"));
  auto c_waits = c.enqueue(l("a"));
  p.hold(l("p"));
  q.hold(l("q"));
  auto p_waits = p.enqueue(l("q"));
  auto q_waits = q.enqueue(l("p"));
  s1.hold(l("s"));
  auto s_waits = s2.enqueue(l("s"));
  const auto closed = Clock::now();

  ASSERT_TRUE(eventually([&] { return d.mirror().stats().nodes == 12 && d.mirror().idle(); }, 10s));
  std::this_thread::sleep_until(closed + cfg.min_wait + 50ms);  // every wait old enough to count
  const auto reports = d.scan_once();
  ASSERT_EQ(reports.size(), 3u);
  std::set<std::string> victims;
  for (const auto& r : reports) {
    EXPECT_EQ(r.outcome, "revoked") << r.text << ": " << r.detail;
    victims.insert(r.victim.owner);
    print_report(r, cfg, "one scan");
  }
  EXPECT_EQ(victims, (std::set<std::string>{"C", "Q", "S"}));

  const auto bound = latency_bound(cfg.min_wait, cfg.interval);
  expect_victim(c_waits, closed, "A -[" + l("b") + "]-> B -[" + l("c") + "]-> C -[" + l("a") + "]-> A", bound,
                "3-cycle");
  expect_victim(q_waits, closed, "P -[" + l("q") + "]-> Q -[" + l("p") + "]-> P", bound, "2-cycle");
  expect_victim(s_waits, closed, "S -[" + l("s") + "]-> S", bound, "self-loop");
  // The others proceed once the victims back off.
  c.release_all();
  expect_granted(b_waits, "B");
  b.keep(b_waits);
  b.release_all();
  expect_granted(a_waits, "A");
  q.release_all();
  expect_granted(p_waits, "P");
  EXPECT_TRUE(d.scan_once().empty());
}

// R1 holds X (shared) and waits for Y; W waits for X behind R1; R2 holds Y
// (shared) and waits for X behind W: R2 -> W is a soft edge (queue order).
TEST(DetectorE2E, ReadWriteSoftEdgeCycleWithFairSharedMutex) {
  const auto zk = test::shared_server().connect_string();
  const auto root = test::unique_path("e2e-rw");
  const auto x = root + "/x", y = root + "/y";
  auto cfg = config(zk, root, "e2e-rw");
  Running run(cfg);
  ASSERT_TRUE(run.daemon().election().wait_leader(10s));
  Client c1(session(zk)), c2(session(zk)), c3(session(zk));
  Actor r1(c1, "R1", 0, true), w(c2, "W", 0, true), r2(c3, "R2", 0, true);
  r1.hold(x, Mode::shared);
  r2.hold(y, Mode::shared);
  auto w_waits = w.enqueue(x, Mode::exclusive);
  auto r2_waits = r2.enqueue(x, Mode::shared);
  const auto closed = Clock::now();
  auto r1_waits = r1.enqueue(y, Mode::exclusive);  // the cycle closes; the youngest wait

  const auto bound = latency_bound(cfg.min_wait, cfg.interval);
  // The record lists {owner, lock, node} per wait, not edge kinds: the
  // victim's message draws every edge plain; the detector's report marks
  // the soft one.
  expect_victim(r1_waits, closed, "R1 -[" + y + "]-> R2 -[" + x + "]-> W -[" + x + "]-> R1", bound, "rw soft edge");
  const auto revoked = run.wait_for("revoked", 1, 5s);
  ASSERT_EQ(revoked.size(), 1u);
  EXPECT_EQ(revoked[0].text, "R1 -[" + y + "]-> R2 ~[" + x + "]~> W -[" + x + "]-> R1");
  print_report(revoked[0], cfg, "rw soft edge");
  EXPECT_FALSE(w_waits.done()) << w_waits.message();
  r1.release_all();  // R1 backs off: W gets X, then R2 after W
  expect_granted(w_waits, "W");
  w.keep(w_waits);
  w.release_all();
  expect_granted(r2_waits, "R2");
  r2.keep(r2_waits);
}

// --mode all: the victim loses its waiting node and every node it holds; its
// held lease hears on_lost(revoked) with the cycle, and the other owner
// proceeds without the victim doing anything.
TEST(DetectorE2E, ModeAllRevokesTheVictimsHeldLocksToo) {
  const auto zk = test::shared_server().connect_string();
  const auto root = test::unique_path("e2e-all");
  auto cfg = config(zk, root, "e2e-all");
  cfg.mode = RevocationMode::all;
  Running run(cfg);
  ASSERT_TRUE(run.daemon().election().wait_leader(10s));
  Client ca(session(zk)), cb(session(zk));
  Actor a(ca, "alice"), b(cb, "bob");
  const auto x = root + "/x", y = root + "/y";
  a.hold(x);
  b.hold(y);
  // Alone in its queue, so not in the scan's snapshot: revoked all the same.
  b.hold(root + "/z");
  const auto lone_node = b.leases()[1].node_path();
  auto lost = std::make_shared<std::promise<std::pair<LossReason, std::string>>>();
  b.leases()[0].on_lost([lost](LossReason r, const std::string& d) { lost->set_value({r, d}); });
  const auto held_node = b.leases()[0].node_path();
  auto a_waits = a.enqueue(y);
  const auto closed = Clock::now();
  auto b_waits = b.enqueue(x);

  const auto cycle = "alice -[" + y + "]-> bob -[" + x + "]-> alice";
  const auto bound = latency_bound(cfg.min_wait, cfg.interval);
  expect_victim(b_waits, closed, cycle, bound, "mode all");
  auto f = lost->get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready) << "bob's held lease heard nothing";
  const auto [reason, detail] = f.get();
  EXPECT_EQ(reason, LossReason::revoked);
  EXPECT_NE(detail.find(cycle), std::string::npos) << detail;
  EXPECT_NE(detail.find("mode all"), std::string::npos) << detail;
  EXPECT_FALSE(b.leases()[0].valid());
  expect_granted(a_waits, "alice, without bob backing off");  // bob still "holds" his lost lease object
  a.keep(a_waits);
  expect_revoked(run, "bob", "mode all");
  const auto rec = protocol::read_revocation_record(ca, held_node);
  ASSERT_TRUE(rec) << "no record for the held node " << held_node;
  EXPECT_EQ(rec->mode, "all");
  EXPECT_EQ(cycle_text(*rec), cycle);
  EXPECT_TRUE(eventually([&] { return !b.leases()[1].valid(); }, 10s)) << "bob's lone lease is still valid";
  EXPECT_FALSE(ca.try_stat(lone_node).has_value());
  const auto lone_rec = protocol::read_revocation_record(ca, lone_node);
  ASSERT_TRUE(lone_rec) << "no record for the node bob held alone " << lone_node;
  EXPECT_EQ(lone_rec->mode, "all");
  EXPECT_EQ(cycle_text(*lone_rec), cycle);
}

// ===========================================================================
// Record pruning

TEST(DetectorE2E, TheLeaderPrunesRevocationRecordsToTheNewestN) {
  test::ZkServer server;  // own server: pruning is global to /zklock/revocations
  server.start();
  const auto zk = server.connect_string();
  const auto root = test::unique_path("e2e-prune");
  Client admin(session(zk));
  admin.ensure_path(std::string(protocol::kRevocationsPath), CreateMode::persistent);
  std::vector<std::string> seeded;
  for (int i = 0; i < 5; ++i) {
    protocol::RevocationRecord r;
    r.victim_node = root + "/old/" + protocol::lock_node_prefix(Mode::exclusive, protocol::owner_key("old"), protocol::new_guid()) + "000000000" +
                    std::to_string(i);
    r.victim_owner = "old";
    r.policy = "operator";
    r.detector = "seed";
    r.reason = "seeded record " + std::to_string(i);
    const auto path = protocol::revocation_record_path(r.victim_node);
    ASSERT_NO_THROW(admin.create(path, protocol::encode_revocation_record(r), CreateMode::persistent));
    seeded.push_back(path.substr(std::string(protocol::kRevocationsPath).size() + 1));
  }

  auto cfg = config(zk, root, "e2e-prune");
  cfg.keep_records = 3;
  cfg.prune_interval = 300ms;
  Running run(cfg);
  ASSERT_TRUE(run.daemon().election().wait_leader(10s));
  Client ca(session(zk)), cb(session(zk));
  Actor a(ca, "alice"), b(cb, "bob");
  auto c = cross_order(a, b, root + "/x", root + "/y");
  expect_victim(c.b_waits, c.closed, "alice -[" + root + "/y]-> bob -[" + root + "/x]-> alice",
                latency_bound(cfg.min_wait, cfg.interval), "prune");
  expect_revoked(run, "bob", "prune");
  const auto victim_record = [&] {
    const auto revoked = run.wait_for("revoked", 1, 1s);
    return split_path(revoked.at(0).victim.node).second;
  }();

  const std::set<std::string> expected{seeded[3], seeded[4], victim_record};
  std::set<std::string> left;
  EXPECT_TRUE(eventually(
      [&] {
        const auto names = admin.children(std::string(protocol::kRevocationsPath));
        left = {names.begin(), names.end()};
        return left == expected;
      },
      10s))
      << "left: " << left.size() << " records";
  std::printf("[ prune    ] 6 records, --keep-records 3: the newest 3 kept (%zu left)\n", left.size());
  b.release_all();
  expect_granted(c.a_waits, "alice");
}

}  // namespace
}  // namespace zklock::detector
