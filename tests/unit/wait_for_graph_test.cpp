#include "detector/wait_for_graph.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <random>

#include "detector/lock_queue.hpp"

namespace zklock::detector {
namespace {

constexpr std::int64_t kNow = 1'700'000'000'000;
constexpr std::int64_t kOld = kNow - 10'000;  // well past the 1 s min-wait

// A lock node of `owner` with sequence `seq`, created at `ctime`.
QueueNode node(const std::string& owner, Mode mode, std::int32_t seq, std::int64_t ctime = kOld,
               std::int64_t czxid = 0) {
  QueueNode n;
  n.owner = owner;
  n.owner_key = owner_key(owner);
  n.mode = mode;
  n.sequence = seq;
  n.name = lock_node_prefix(mode, n.owner_key, std::string(32, 'a' + static_cast<char>(seq % 6))) +
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

TEST(WaitForGraph, WrapAndSaturationOrderQueues) {
  // Across the wrap: INT32_MAX was issued before INT32_MIN.
  auto a = analyze({{"/locks/x", {w("B", INT32_MIN), w("A", INT32_MAX)}}});
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

TEST(WaitForGraph, OwnerFallsBackToOwnerKeyWhenDataIsMissingOrForged) {
  auto n1 = w("A", 1);
  n1.owner.clear();  // data unknown
  auto n2 = w("B", 2);
  n2.owner = "forged";  // does not hash to the key in the name
  auto a = analyze({{"/locks/x", {n1, n2}}});
  const auto owners = a.graph.owners();
  EXPECT_EQ(owners, (std::vector<std::string>{"owner-key:" + owner_key("A"), "owner-key:" + owner_key("B")}));
  // Another node of A with valid data names all of A's nodes.
  auto a2 = analyze({{"/locks/x", {n1, n2}}, {"/locks/y", {w("A", 1)}}});
  EXPECT_EQ(a2.graph.waits()[0].blocker, "A");
}

TEST(WaitForGraph, ResultIsIndependentOfInsertionOrder) {
  std::vector<LockQueue> qs{{"/locks/x", {w("A", 1), w("B", 2), w("C", 3)}},
                            {"/locks/y", {w("B", 1), w("A", 2)}},
                            {"/locks/z", {w("C", 1), w("B", 3)}}};
  const auto expected = analyze(qs).graph.to_json();
  std::mt19937 rng(7);
  for (int i = 0; i < 20; ++i) {
    std::shuffle(qs.begin(), qs.end(), rng);
    for (auto& q : qs) std::shuffle(q.nodes.begin(), q.nodes.end(), rng);
    EXPECT_EQ(analyze(qs).graph.to_json(), expected);
  }
}

TEST(WaitForGraph, Renderers) {
  auto a = analyze({{"/locks/x", {r("R1", 1), w("W", 2), r("R2", 3)}},
                    {"/locks/y", {r("R2", 1), w("R1", 2)}}});
  const auto text = a.graph.to_text();
  EXPECT_NE(text.find("R2 waits for W on /locks/x (soft)"), std::string::npos) << text;
  EXPECT_NE(text.find("cycle: R1 -[/locks/y]-> R2"), std::string::npos) << text;
  const auto dot = a.graph.to_dot();
  EXPECT_EQ(dot.rfind("digraph waits_for {", 0), 0u);
  EXPECT_NE(dot.find("\"R2\" -> \"W\" [label=\"/locks/x\", style=dashed, color=red"), std::string::npos) << dot;
  const auto json = a.graph.to_json();
  EXPECT_NE(json.find("\"cycles\":[{\"text\":\"R1 -[/locks/y]-> R2 ~[/locks/x]~> W -[/locks/x]-> R1\""),
            std::string::npos)
      << json;
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
}  // namespace zklock::detector
