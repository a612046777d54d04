// zklock-detector's mirror and metrics against a real ZooKeeper server:
// what the mirror reads (nothing while nothing changes; a node only once
// its queue is contended), the scan's snapshot against the whole mirror,
// and the exported scan quantiles, mirror load time and oldest-head gauge.
// Lock nodes are planted directly (planted::Owner in detector_fixtures.hpp).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "detector/daemon.hpp"
#include "detector_fixtures.hpp"
#include "zk_harness.hpp"

namespace zklock::detector {
namespace {

using namespace zklock::model;
using namespace planted;

using namespace std::chrono_literals;

TEST(Detector, ScansCostNoZooKeeperReadsWhileNothingChanges) {
  const auto root = test::unique_path("det-ops");
  Owner a("A");
  a.hold(root + "/one/x");
  a.hold(root + "/two/deeper/y");
  auto cfg = config(root);
  Daemon d(cfg);
  ASSERT_TRUE(d.mirror().wait_idle(10s));
  const auto before = d.mirror().stats();
  EXPECT_EQ(before.nodes, 2u);
  for (int i = 0; i < 20; ++i) d.scan_once();
  EXPECT_EQ(d.mirror().stats().ops_issued, before.ops_issued);
  // A change costs a re-list of that one directory plus, as x's queue
  // becomes contended, one read of each of its two nodes.
  a.hold(root + "/one/x");
  test::eventually([&] { return d.mirror().stats().nodes >= 3; }, 10s);
  ASSERT_TRUE(d.mirror().wait_idle(10s));
  EXPECT_EQ(d.mirror().stats().nodes, 3u);
  EXPECT_EQ(d.mirror().stats().ops_issued, before.ops_issued + 3);
}

// A lock path held alone costs its listing and no read of its node: the
// node's index entry comes from its name. When a second node arrives, both
// are read, and the snapshot has their owners, priorities and stats.
TEST(Detector, TheMirrorReadsANodeOnlyOnceItsQueueIsContended) {
  const auto root = test::unique_path("det-lone");
  Owner a("A", 3), b("B", 5);
  const auto a_x = a.hold(root + "/x");
  b.hold(root + "/y");
  Client client(ClientOptions{.connect = test::shared_server().connect_string(), .session_timeout = 6s});
  std::mutex mu;
  std::condition_variable cv;
  std::vector<std::string> added;  // on_node_added's lock paths
  MirrorOptions mo;
  mo.root = root;
  mo.on_node_added = [&](const std::string& lock, std::int64_t) {
    std::lock_guard lock_guard(mu);
    added.push_back(lock);
    cv.notify_all();
  };
  Mirror m(client, mo);
  m.start();
  ASSERT_TRUE(m.wait_idle(10s));
  auto st = m.stats();
  EXPECT_EQ(st.nodes, 2u);
  EXPECT_EQ(st.ops_issued, 3u) << "one list each of the root, x and y; no read of a lone node";
  EXPECT_GT(st.load_seconds, 0.0);
  {
    std::lock_guard lock_guard(mu);
    EXPECT_TRUE(added.empty());
  }
  const auto lone_snap = m.snapshot();
  EXPECT_TRUE(lone_snap.contended.empty());
  EXPECT_EQ(lone_snap.lone_queues, 2u);
  for (const auto& q : m.queues()) {
    ASSERT_EQ(q.nodes.size(), 1u);
    EXPECT_EQ(q.nodes[0].czxid, 0) << "a lone node is not read";
    EXPECT_TRUE(q.nodes[0].owner.empty());
  }
  const auto a_lone = m.lone_nodes(protocol::owner_key("A"));
  ASSERT_EQ(a_lone.size(), 1u);
  EXPECT_EQ(a_lone[0].path, a_x);

  // B queues behind A on x: the re-list of x and a read of each of its nodes.
  const auto b_x = b.enqueue(root + "/x", Mode::exclusive);
  {
    std::unique_lock lock_guard(mu);
    ASSERT_TRUE(cv.wait_for(lock_guard, 10s, [&] { return added.size() >= 2; }));
    EXPECT_EQ(added, (std::vector<std::string>{root + "/x", root + "/x"}));
  }
  ASSERT_TRUE(m.wait_idle(10s));
  EXPECT_EQ(m.stats().ops_issued, st.ops_issued + 3);
  const auto snap = m.snapshot();
  ASSERT_EQ(snap.contended.size(), 1u);
  EXPECT_EQ(snap.lone_queues, 1u);
  ASSERT_EQ(snap.contended[0].nodes.size(), 2u);
  for (const auto& n : snap.contended[0].nodes) {
    const bool is_a = node_path(root + "/x", n.name) == a_x;
    EXPECT_TRUE(is_a || node_path(root + "/x", n.name) == b_x);
    EXPECT_EQ(n.owner, is_a ? "A" : "B");
    EXPECT_EQ(n.priority, is_a ? 3 : 5);
    EXPECT_EQ(n.czxid, client.stat(node_path(root + "/x", n.name)).czxid);
    EXPECT_NE(n.ctime_ms, 0);
  }
  EXPECT_EQ(snap.keys.at(protocol::owner_key("A")).owner, "A");
  EXPECT_EQ(snap.keys.at(protocol::owner_key("B")).owner, "B");
  EXPECT_EQ(snap.keys.at(protocol::owner_key("B")).held_alone, 1u) << "B holds y alone";
  const auto analysis = analyze_snapshot(
      snap, AnalyzeOptions{std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count(), 0ms});
  EXPECT_EQ(analysis.owners.at("B").held_count(), 1u);
  EXPECT_EQ(analysis.owners.at("B").waiting.size(), 1u);
  EXPECT_EQ(analysis.owners.at("A").held, std::vector<std::string>{a_x});

  // B leaves x: x is lone again and its read stays; nothing more is read.
  const auto ops = m.stats().ops_issued;
  remove_node(b.client(), b_x);
  ASSERT_TRUE(test::eventually([&] { return m.stats().nodes == 2u && m.idle(); }, 10s));
  EXPECT_EQ(m.stats().ops_issued, ops + 1) << "the re-list of x only";
  EXPECT_TRUE(m.snapshot().contended.empty());
  EXPECT_NE(m.lone_nodes(protocol::owner_key("A")).at(0).czxid, 0);
}

// The recent-scan summary: nearest-rank quantiles over the last 128 scans
// only, _sum/_count over all of them; and the mirror's load time once idle.
TEST(Detector, ExportsRecentScanQuantilesAndTheMirrorLoadTime) {
  Metrics m;
  const std::string name = "zklock_detector_scan_recent_seconds";
  EXPECT_EQ(m.render().find(name + "{quantile="), std::string::npos) << "no quantile before the first scan";
  MirrorStats ms;
  // Scans 1..200 ms: the last 128 are 73..200 ms.
  for (int i = 1; i <= 200; ++i) {
    Metrics::ScanFigures f;
    f.scan_seconds = i / 1000.0;
    ms.load_seconds = 2.5;
    m.record_scan(f, ms);
  }
  const auto text = m.render();
  EXPECT_NE(text.find("# TYPE " + name + " summary\n"), std::string::npos) << text;
  EXPECT_NE(text.find(name + "{quantile=\"0.5\"} 0.136\n"), std::string::npos) << text;  // rank 64 of 73..200
  EXPECT_NE(text.find(name + "{quantile=\"0.99\"} 0.199\n"), std::string::npos) << text;  // rank 127
  EXPECT_NE(text.find(name + "{quantile=\"1\"} 0.2\n"), std::string::npos) << text;
  EXPECT_NE(text.find(name + "_sum 20.1\n"), std::string::npos) << text;
  EXPECT_NE(text.find(name + "_count 200\n"), std::string::npos) << text;
  EXPECT_NE(text.find("\nzklock_detector_mirror_load_seconds 2.5\n"), std::string::npos) << text;

  // A daemon's first scan after its mirror loaded exports the load time.
  const auto root = test::unique_path("det-load");
  Owner a("A");
  a.hold(root + "/x");
  Daemon d(config(root));
  ASSERT_TRUE(d.mirror().wait_idle(10s));
  d.scan_once();
  const auto rendered = d.metrics().render();
  const auto at = rendered.find("\nzklock_detector_mirror_load_seconds ");
  ASSERT_NE(at, std::string::npos) << rendered;
  const double load = std::strtod(rendered.c_str() + at + 37, nullptr);
  EXPECT_GT(load, 0.0) << rendered;
  EXPECT_LT(load, 10.0) << rendered;
  EXPECT_NE(rendered.find(name + "{quantile=\"1\"} "), std::string::npos) << rendered;
}

// A gauge's value in the detector's /metrics text; NaN when absent.
double gauge(const Daemon& d, const std::string& name) {
  const auto text = d.metrics().render();
  const auto at = text.find("\n" + name + " ");
  return at == std::string::npos ? std::nan("") : std::strtod(text.c_str() + at + name.size() + 2, nullptr);
}

std::int64_t wall_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// How long the oldest head has kept others waiting, as exported.
// Counted from the first waiter's arrival (not the head's creation), it
// grows scan by scan; when the head changes it restarts from the scan that
// still saw the old head (not from the new head's creation, long before);
// a head with nobody behind it counts 0. Scans are run by hand, so the
// bounds below are exact: ctime and our clock are one machine's (1 ms
// rounding each way).
TEST(Detector, ExportsHowLongTheOldestHeadHasKeptOthersWaiting) {
  static const std::string kGauge = "zklock_detector_oldest_head_with_waiters_seconds";
  const auto root = test::unique_path("det-head");
  const auto x = root + "/x";
  Owner a("A"), b("B"), c("C");
  Daemon d(config(root));
  const auto scan = [&] {
    d.scan_once();
    return gauge(d, kGauge);
  };
  const auto mirrored = [&](std::size_t n) {
    return test::eventually([&] { return d.mirror().stats().nodes == n && d.mirror().idle(); }, 10s);
  };
  const auto a_node = a.hold(x);
  ASSERT_TRUE(mirrored(1));
  // Alone for half a second, scanned all along: it keeps nobody waiting.
  const auto a_created = a.client().stat(a_node).ctime;
  ASSERT_TRUE(test::eventually([&] {
    EXPECT_EQ(scan(), 0.0) << "a head alone keeps nobody waiting";
    return wall_ms() - a_created >= 500;
  }, 10s));

  const auto waiters_from = wall_ms();
  const auto b_node = b.enqueue(x, Mode::exclusive);
  c.enqueue(x, Mode::exclusive);
  ASSERT_TRUE(mirrored(3));
  double g = scan();
  EXPECT_GE(g, 0.0);
  EXPECT_LE(g, (wall_ms() - waiters_from + 2) / 1000.0);
  ASSERT_TRUE(test::eventually([&] { return (g = scan()) >= 1.0; }, 10s)) << d.metrics().render();
  EXPECT_LE(g, (wall_ms() - waiters_from + 2) / 1000.0);

  // A leaves; B, queued over a second ago, is the head with C behind it.
  const auto before_change = wall_ms();
  scan();  // the last scan that sees A at the head
  remove_node(a.client(), a_node);
  ASSERT_TRUE(mirrored(2));
  g = scan();
  EXPECT_LE(g, (wall_ms() - before_change + 2) / 1000.0) << "counted from B's creation, not from the change";
  const auto from_change = g;
  ASSERT_TRUE(test::eventually([&] { return (g = scan()) >= from_change + 0.2; }, 10s));

  remove_node(b.client(), b_node);  // C alone
  ASSERT_TRUE(mirrored(1));
  EXPECT_EQ(scan(), 0.0);
}

// The scan reads only the contended queues and the mirror's summary of the
// rest; as watches add and remove nodes, it must keep agreeing with an
// analysis of every mirrored queue.
TEST(Detector, TheScanSnapshotAgreesWithTheWholeMirrorAsNodesComeAndGo) {
  const auto root = test::unique_path("det-index");
  Owner a("A"), b("B");
  a.hold(root + "/l1");
  a.hold(root + "/deep/l2");
  plant_two_cycle(a, b, root);
  auto cfg = config(root);
  cfg.dry_run = true;
  Daemon d(cfg);
  auto settle = [&](std::size_t nodes) {
    test::eventually([&] { return d.mirror().stats().nodes == nodes && d.mirror().idle(); }, 10s);
    ASSERT_EQ(d.mirror().stats().nodes, nodes);
  };
  auto expect_agreement = [&](std::size_t contended, std::size_t a_held) {
    std::this_thread::sleep_for(cfg.min_wait);  // every wait counts
    const AnalyzeOptions o{std::chrono::duration_cast<std::chrono::milliseconds>(
                               std::chrono::system_clock::now().time_since_epoch()).count(),
                           cfg.min_wait};
    const auto snap = d.mirror().snapshot();
    EXPECT_EQ(snap.contended.size(), contended);
    const auto fast = analyze_snapshot(snap, o);
    const auto full = analyze_queues(d.mirror().queues(), o);
    EXPECT_EQ(fast.graph.waits(), full.graph.waits());
    EXPECT_EQ(fast.graph.cycles(), full.graph.cycles());
    EXPECT_EQ(fast.locks, full.locks);
    EXPECT_EQ(fast.holders, full.holders);
    EXPECT_EQ(fast.waiters, full.waiters);
    EXPECT_EQ(fast.owners.at("A").held_count(), a_held);
    EXPECT_EQ(full.owners.at("A").held_count(), a_held);
  };
  settle(6);
  expect_agreement(2, 3);  // A holds l1, l2 alone and x
  {
    Owner c("C");
    c.enqueue(root + "/l1", Mode::exclusive);  // l1 becomes contended
    c.hold(root + "/l3");
    settle(8);
    expect_agreement(3, 3);
    EXPECT_EQ(d.mirror().lone_nodes(protocol::owner_key("C")).size(), 1u);
  }  // C's session closes: l1 is lone again, l3 is gone
  settle(6);
  expect_agreement(2, 3);
  EXPECT_TRUE(d.mirror().lone_nodes(protocol::owner_key("C")).empty());
  EXPECT_EQ(d.mirror().lone_nodes(protocol::owner_key("A")).size(), 2u);
  EXPECT_EQ(d.scan_once().size(), 1u);
}

}  // namespace
}  // namespace zklock::detector
