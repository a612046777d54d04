#include "model/wait_for_graph.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <random>

#include <nlohmann/json.hpp>

#include "model/lock_queue.hpp"

namespace zklock::model {
namespace {

constexpr std::int64_t kNow = 1'700'000'000'000;
constexpr std::int64_t kOld = kNow - 10'000;  // well past the 1 s min-wait

// A lock node of `owner` with sequence `seq`, created at `ctime`.
QueueNode node(const std::string& owner, Mode mode, std::int32_t seq, std::int64_t ctime = kOld,
               std::int64_t czxid = 0) {
  QueueNode n;
  n.owner = owner;
  n.owner_key = protocol::owner_key(owner);
  n.mode = mode;
  n.sequence = seq;
  n.name = protocol::lock_node_prefix(mode, n.owner_key, std::string(32, 'a' + static_cast<char>(seq % 6))) +
           std::to_string(seq);
  n.czxid = czxid ? czxid : 1000 + static_cast<std::int64_t>(seq);
  n.ctime_ms = ctime;
  return n;
}
QueueNode w(const std::string& owner, std::int32_t seq, std::int64_t ctime = kOld) {
  return node(owner, Mode::exclusive, seq, ctime);
}
QueueNode r(const std::string& owner, std::int32_t seq, std::int64_t ctime = kOld) {
  return node(owner, Mode::shared, seq, ctime);
}

WaitAnalysis analyze(const std::vector<LockQueue>& qs, std::chrono::milliseconds min_wait = std::chrono::seconds(1)) {
  return analyze_queues(qs, AnalyzeOptions{kNow, min_wait});
}

std::vector<std::string> sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST(WaitForGraph, TwoCycleIsFoundAsConcreteCycle) {
  // A holds X and waits for Y; B holds Y and waits for X.
  auto a = analyze({{"/locks/x", {w("A", 1), w("B", 2)}}, {"/locks/y", {w("B", 1), w("A", 2)}}});
  const auto cycles = a.graph.cycles();
  ASSERT_EQ(cycles.size(), 1u);
  const auto& c = cycles[0];
  ASSERT_EQ(c.waits.size(), 2u);
  EXPECT_EQ(c.waits[0].waiter, "A");
  EXPECT_EQ(c.waits[0].blocker, "B");
  EXPECT_EQ(c.waits[0].lock, "/locks/y");
  EXPECT_EQ(c.waits[0].kind, EdgeKind::hard);
  EXPECT_EQ(c.waits[1].waiter, "B");
  EXPECT_EQ(c.waits[1].blocker, "A");
  EXPECT_EQ(c.waits[1].lock, "/locks/x");
  EXPECT_EQ(cycle_text(c), "A -[/locks/y]-> B -[/locks/x]-> A");
  EXPECT_EQ(c.node_paths().size(), 4u);
  EXPECT_EQ(a.holders, 2u);
  EXPECT_EQ(a.waiters, 2u);
  EXPECT_EQ(a.locks, 2u);
}

TEST(WaitForGraph, ThreeCycle) {
  auto a = analyze({{"/locks/x", {w("A", 1), w("C", 2)}},
                    {"/locks/y", {w("B", 1), w("A", 2)}},
                    {"/locks/z", {w("C", 1), w("B", 2)}}});
  const auto cycles = a.graph.cycles();
  ASSERT_EQ(cycles.size(), 1u);
  EXPECT_EQ(cycle_text(cycles[0]), "A -[/locks/y]-> B -[/locks/z]-> C -[/locks/x]-> A");
}

TEST(WaitForGraph, ReadWriteSoftEdgeCycle) {
  // R1 holds X (shared) and waits for Y; W waits for X behind R1; R2 holds Y
  // (shared) and waits for X behind W.
  auto a = analyze({{"/locks/x", {r("R1", 1), w("W", 2), r("R2", 3)}},
                    {"/locks/y", {r("R2", 1), w("R1", 2)}}});
  const auto cycles = a.graph.cycles();
  ASSERT_EQ(cycles.size(), 1u);
  EXPECT_EQ(cycle_text(cycles[0]), "R1 -[/locks/y]-> R2 ~[/locks/x]~> W -[/locks/x]-> R1");
  EXPECT_EQ(cycles[0].waits[1].kind, EdgeKind::soft);
  // R2 waits only for the writer, not for the reader R1 ahead of it.
  for (const auto& wt : a.graph.waits()) {
    EXPECT_FALSE(wt.waiter == "R2" && wt.blocker == "R1") << wt.lock;
  }
}

TEST(WaitForGraph, SharedHoldersDoNotWaitForEachOther) {
  auto a = analyze({{"/locks/x", {r("A", 1), r("B", 2), r("C", 3)}}});
  EXPECT_EQ(a.holders, 3u);
  EXPECT_EQ(a.waiters, 0u);
  EXPECT_EQ(a.graph.wait_count(), 0u);
}

TEST(WaitForGraph, SelfLoop) {
  // A holds X and waits for X again with a second node.
  auto a = analyze({{"/locks/x", {w("A", 1), w("A", 2)}}});
  const auto cycles = a.graph.cycles();
  ASSERT_EQ(cycles.size(), 1u);
  ASSERT_EQ(cycles[0].waits.size(), 1u);
  EXPECT_EQ(cycles[0].waits[0].waiter, "A");
  EXPECT_EQ(cycles[0].waits[0].blocker, "A");
  EXPECT_EQ(cycle_text(cycles[0]), "A -[/locks/x]-> A");
}

TEST(WaitForGraph, TwoDisjointCyclesInOneScan) {
  auto a = analyze({{"/locks/x", {w("A", 1), w("B", 2)}},
                    {"/locks/y", {w("B", 1), w("A", 2)}},
                    {"/locks/p", {w("P", 1), w("Q", 2)}},
                    {"/locks/q", {w("Q", 1), w("P", 2)}}});
  const auto cycles = a.graph.cycles();
  ASSERT_EQ(cycles.size(), 2u);
  EXPECT_EQ(sorted(cycles[0].owners()), (std::vector<std::string>{"A", "B"}));
  EXPECT_EQ(sorted(cycles[1].owners()), (std::vector<std::string>{"P", "Q"}));
}

TEST(WaitForGraph, ChainWithoutCycleReportsNothing) {
  auto a = analyze({{"/locks/x", {w("A", 1), w("B", 2), w("C", 3)}}});
  EXPECT_EQ(a.graph.wait_count(), 3u);  // B->A, C->A (hard), C->B (soft)
  EXPECT_TRUE(a.graph.cycles().empty());
}

TEST(WaitForGraph, ShortestCycleAvoidsBystanders) {
  // B waits behind A on X but is not part of the deadlock between A and C.
  auto a = analyze({{"/locks/x", {w("A", 1), w("B", 2), w("C", 3)}},
                    {"/locks/y", {w("C", 1), w("A", 2)}}});
  const auto cycles = a.graph.cycles();
  ASSERT_EQ(cycles.size(), 1u);
  EXPECT_EQ(sorted(cycles[0].owners()), (std::vector<std::string>{"A", "C"}));
}

TEST(WaitForGraph, YoungWaitsAreIgnored) {
  const auto young = kNow - 200;
  auto a = analyze({{"/locks/x", {w("A", 1), w("B", 2)}}, {"/locks/y", {w("B", 1), w("A", 2, young)}}});
  EXPECT_TRUE(a.graph.cycles().empty());
  EXPECT_EQ(a.waiters, 2u);
  // The same wait counts once it is older than min-wait.
  auto b = analyze({{"/locks/x", {w("A", 1), w("B", 2)}}, {"/locks/y", {w("B", 1), w("A", 2, young)}}},
                   std::chrono::milliseconds(100));
  EXPECT_EQ(b.graph.cycles().size(), 1u);
  EXPECT_EQ(b.oldest_wait_ms, 10'000);
}

TEST(WaitForGraph, UnknownStatNeverCountsAsWait) {
  auto a = analyze({{"/locks/x", {w("A", 1), w("B", 2)}}, {"/locks/y", {w("B", 1), w("A", 2, 0)}}});
  EXPECT_TRUE(a.graph.cycles().empty());
}

TEST(WaitForGraph, WrapAndSaturationOrderQueuesByCzxid) {
  // Across the wrap: INT32_MAX was issued before INT32_MIN (smaller czxid).
  auto a = analyze({{"/locks/x", {node("B", Mode::exclusive, INT32_MIN, kOld, 600),
                                  node("A", Mode::exclusive, INT32_MAX, kOld, 500)}}});
  ASSERT_EQ(a.graph.wait_count(), 1u);
  EXPECT_EQ(a.graph.waits()[0].waiter, "B");
  EXPECT_EQ(a.graph.waits()[0].blocker, "A");
  EXPECT_EQ(a.owners["A"].held.size(), 1u);
  // Saturated counter: equal sequences ordered by czxid.
  auto x1 = node("A", Mode::exclusive, INT32_MAX, kOld, 500);
  auto x2 = node("B", Mode::exclusive, INT32_MAX, kOld, 400);
  x2.name += "b";  // distinct names
  auto s = analyze({{"/locks/x", {x1, x2}}});
  ASSERT_EQ(s.graph.wait_count(), 1u);
  EXPECT_EQ(s.graph.waits()[0].waiter, "A");
  EXPECT_EQ(s.graph.waits()[0].blocker, "B");
}

TEST(WaitForGraph, OverlappingCreatesAtTheCountersEndQueueInCzxidOrder) {
  // ZooKeeper 3.8.0 at a saturated counter: suffixes 2147483647,
  // -2147483648, -2147483647, 2147483647 with czxids 4, 5, 6, 7. Creation
  // order is czxid order; wrap-aware suffix order would put czxid 7 second.
  auto h = node("H", Mode::exclusive, INT32_MAX, kOld, 4);
  auto a2 = node("A", Mode::exclusive, INT32_MIN, kOld, 5);
  auto a3 = node("C", Mode::exclusive, INT32_MIN + 1, kOld, 6);
  auto b = node("B", Mode::exclusive, INT32_MAX, kOld, 7);
  b.name += "b";
  std::vector<QueueNode> q{b, a3, h, a2};
  EXPECT_TRUE(sort_queue(q));
  ASSERT_EQ(q.size(), 4u);
  EXPECT_EQ(q[0].czxid, 4);
  EXPECT_EQ(q[1].czxid, 5);
  EXPECT_EQ(q[2].czxid, 6);
  EXPECT_EQ(q[3].czxid, 7);
  auto an = analyze({{"/locks/x", {b, a3, h, a2}}});
  EXPECT_EQ(an.holders, 1u);
  EXPECT_EQ(an.owners["H"].held.size(), 1u);
}

TEST(WaitForGraph, UnknownCzxidNeverSortsFirstAmongTiedNodes) {
  auto known = node("A", Mode::exclusive, INT32_MAX, kOld, 500);
  auto unknown = node("B", Mode::exclusive, INT32_MAX, kOld, 0);
  unknown.czxid = 0;
  unknown.name = "0" + known.name;  // distinct, and first by name
  std::vector<QueueNode> q{unknown, known};
  EXPECT_FALSE(sort_queue(q));  // not exact until the stat arrives
  EXPECT_EQ(q[0].owner, "A");
  EXPECT_EQ(q[1].owner, "B");
  auto an = analyze({{"/locks/x", {unknown, known}}});
  EXPECT_EQ(an.owners["A"].held.size(), 1u);
  EXPECT_TRUE(an.owners["B"].held.empty());
}

TEST(WaitForGraph, OwnerFallsBackToOwnerKeyWhenDataIsMissingOrForged) {
  auto n1 = w("A", 1);
  n1.owner.clear();  // data unknown
  auto n2 = w("B", 2);
  n2.owner = "forged";  // does not hash to the key in the name
  auto a = analyze({{"/locks/x", {n1, n2}}});
  const auto owners = a.graph.owners();
  EXPECT_EQ(owners, (std::vector<std::string>{"owner-key:" + protocol::owner_key("A"), "owner-key:" + protocol::owner_key("B")}));
  // Another node of A with valid data names all of A's nodes.
  auto a2 = analyze({{"/locks/x", {n1, n2}}, {"/locks/y", {w("A", 1)}}});
  EXPECT_EQ(a2.graph.waits()[0].blocker, "A");
}

TEST(WaitForGraph, ResultIsIndependentOfInsertionOrder) {
  std::vector<LockQueue> qs{{"/locks/x", {w("A", 1), w("B", 2), w("C", 3)}},
                            {"/locks/y", {w("B", 1), w("A", 2)}},
                            {"/locks/z", {w("C", 1), w("B", 3)}}};
  const auto first = analyze(qs);
  const auto waits = first.graph.waits();
  const auto cycles = first.graph.cycles();
  std::mt19937 rng(7);
  for (int i = 0; i < 20; ++i) {
    std::shuffle(qs.begin(), qs.end(), rng);
    for (auto& q : qs) std::shuffle(q.nodes.begin(), q.nodes.end(), rng);
    const auto again = analyze(qs);
    EXPECT_EQ(again.graph.waits(), waits);
    EXPECT_EQ(again.graph.cycles(), cycles);
  }
}

TEST(WaitForGraph, JsonRendering) {
  auto a = analyze({{"/locks/x", {r("R1", 1), w("W", 2), r("R2", 3)}},
                    {"/locks/y", {r("R2", 1), w("R1", 2)}}});
  const auto cycles = a.graph.cycles();
  ASSERT_EQ(cycles.size(), 1u);
  const auto j = cycle_json(cycles[0]);
  EXPECT_EQ(j["text"], "R1 -[/locks/y]-> R2 ~[/locks/x]~> W -[/locks/x]-> R1");
  EXPECT_EQ(j["owners"], nlohmann::json({"R1", "R2", "W"}));
  ASSERT_EQ(j["waits"].size(), 3u);
  EXPECT_EQ(j["waits"][1], wait_json(cycles[0].waits[1]));
  EXPECT_EQ(j["waits"][1]["kind"], "soft");
  EXPECT_EQ(j["waits"][1]["waiter"], "R2");
  EXPECT_EQ(j["waits"][1]["blocker"], "W");
  EXPECT_EQ(j["waits"][1]["lock"], "/locks/x");
}

TEST(WaitForGraph, EdgeBudgetTruncatesHugeQueues) {
  LockQueue q{"/locks/big", {}};
  for (int i = 1; i <= 200; ++i) q.nodes.push_back(w("o" + std::to_string(i), i));
  auto a = analyze_queues({q}, AnalyzeOptions{kNow, std::chrono::seconds(1), 1000});
  EXPECT_LE(a.graph.wait_count(), 1000u + 200u);
  EXPECT_GT(a.truncated_waiters, 0u);
  EXPECT_EQ(a.waiters, 199u);
}

TEST(WaitForGraph, AddingTheSameWaitTwiceIsIdempotent) {
  WaitForGraph g;
  Wait wt{"a", "b", "/l", "/l/n1", "/l/n0", EdgeKind::hard};
  g.add_wait(wt);
  g.add_wait(wt);
  EXPECT_EQ(g.wait_count(), 1u);
  EXPECT_EQ(g.owner_count(), 2u);
  EXPECT_TRUE(g.cycles().empty());
}

}  // namespace
}  // namespace zklock::model
