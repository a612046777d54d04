#include "detector/policy.hpp"

#include <gtest/gtest.h>

#include "model/lock_index.hpp"

namespace zklock::detector {
namespace {

using namespace zklock::model;

// Three members: A (oldest node, holds 3, priority 5), B (middle, holds 1,
// priority -1), C (youngest, holds 2, priority 0).
std::vector<Candidate> members() {
  return {{"A", "/locks/y/w_a", 100, 5, 3}, {"B", "/locks/z/w_b", 200, -1, 1}, {"C", "/locks/x/w_c", 300, 0, 2}};
}

std::string victim(const std::vector<Candidate>& cs, PolicyOptions o) { return cs[choose_victim(cs, o)].owner; }

TEST(Policy, EachPolicyPicksItsVictim) {
  const auto cs = members();
  EXPECT_EQ(victim(cs, {Policy::youngest}), "C");
  EXPECT_EQ(victim(cs, {Policy::oldest}), "A");
  EXPECT_EQ(victim(cs, {Policy::fewest_held}), "B");
  EXPECT_EQ(victim(cs, {Policy::most_held}), "A");
  EXPECT_EQ(victim(cs, {Policy::lowest_priority}), "B");
}

TEST(Policy, DefaultIsYoungest) { EXPECT_EQ(victim(members(), {}), "C"); }

TEST(Policy, ProtectedOwnersAreChosenOnlyWhenNobodyElseCan) {
  const auto cs = members();
  EXPECT_EQ(victim(cs, {Policy::youngest, {}, {"C"}}), "B");
  EXPECT_EQ(victim(cs, {Policy::youngest, {}, {"?"}}), "C");  // all protected: policy decides
}

TEST(Policy, PreferredOwnersGoFirstButNeverOverProtection) {
  const auto cs = members();
  EXPECT_EQ(victim(cs, {Policy::youngest, {"A*"}, {}}), "A");
  EXPECT_EQ(victim(cs, {Policy::youngest, {"A", "B"}, {}}), "B");  // policy among preferred
  EXPECT_EQ(victim(cs, {Policy::youngest, {"A"}, {"A"}}), "C");
}

TEST(Policy, TiesBreakByOwnerThenNodePath) {
  std::vector<Candidate> cs{{"b", "/l/2", 5, 0, 1}, {"a", "/l/3", 5, 0, 1}, {"a", "/l/1", 5, 0, 1}};
  for (auto p : {Policy::youngest, Policy::oldest, Policy::fewest_held, Policy::most_held,
                 Policy::lowest_priority}) {
    const auto i = choose_victim(cs, {p});
    EXPECT_EQ(cs[i].owner, "a");
    EXPECT_EQ(cs[i].node, "/l/1");
  }
}

TEST(Policy, NamesRoundTrip) {
  for (const auto& n : policy_names()) {
    auto p = parse_policy(n);
    ASSERT_TRUE(p) << n;
    EXPECT_EQ(policy_name(*p), n);
  }
  EXPECT_FALSE(parse_policy("newest"));
  EXPECT_EQ(policy_names().size(), 5u);
}

TEST(Policy, GlobMatch) {
  EXPECT_TRUE(glob_match("*", ""));
  EXPECT_TRUE(glob_match("batch-*", "batch-7"));
  EXPECT_FALSE(glob_match("batch-*", "xbatch-7"));
  EXPECT_TRUE(glob_match("*/worker-?", "host/12/worker-3"));
  EXPECT_FALSE(glob_match("*/worker-?", "host/12/worker-31"));
  EXPECT_TRUE(glob_match("a*b*c", "axxbyyc"));
  EXPECT_FALSE(glob_match("a*b*c", "axxbyy"));
  EXPECT_TRUE(glob_match(std::string(50, '*') + "x", std::string(5000, 'a') + "x"));
}

TEST(Policy, CandidatesCarryFactsFromTheAnalysis) {
  constexpr std::int64_t now = 1'700'000'000'000;
  auto mk = [&](const std::string& owner, std::int32_t seq, std::int64_t czxid, int prio) {
    QueueNode n;
    n.owner = owner;
    n.owner_key = protocol::owner_key(owner);
    n.sequence = seq;
    n.name = protocol::lock_node_prefix(Mode::exclusive, n.owner_key, std::string(32, 'f')) + std::to_string(seq);
    n.czxid = czxid;
    n.ctime_ms = now - 5000;
    n.priority = prio;
    return n;
  };
  auto a = analyze_queues({{"/locks/x", {mk("A", 1, 10, 0), mk("B", 2, 40, 0)}},
                           {"/locks/y", {mk("B", 1, 20, 0), mk("A", 2, 30, 7)}},
                           {"/locks/z", {mk("A", 1, 5, 0)}}},
                          AnalyzeOptions{now});
  const auto cycles = a.graph.cycles();
  ASSERT_EQ(cycles.size(), 1u);
  const auto cs = cycle_candidates(cycles[0], a);
  ASSERT_EQ(cs.size(), 2u);
  EXPECT_EQ(cs[0].owner, "A");
  EXPECT_EQ(cs[0].czxid, 30);
  EXPECT_EQ(cs[0].priority, 7);
  EXPECT_EQ(cs[0].held, 2u);
  EXPECT_EQ(cs[1].owner, "B");
  EXPECT_EQ(cs[1].czxid, 40);
  EXPECT_EQ(cs[1].held, 1u);
  EXPECT_EQ(cs[choose_victim(cs, {Policy::youngest})].owner, "B");
  EXPECT_EQ(cs[choose_victim(cs, {Policy::lowest_priority})].owner, "B");
  EXPECT_EQ(cs[choose_victim(cs, {Policy::most_held})].owner, "A");

  // The scan's path: /locks/z is alone in its queue, so it is not in the
  // snapshot; A's held count must still include it.
  LockIndex ix;
  for (const auto& q : std::vector<LockQueue>{{"/locks/x", {mk("A", 1, 10, 0), mk("B", 2, 40, 0)}},
                                              {"/locks/y", {mk("B", 1, 20, 0), mk("A", 2, 30, 7)}},
                                              {"/locks/z", {mk("A", 1, 5, 0)}}}) {
    for (const auto& n : q.nodes) ix.insert(q.path, n);
  }
  const auto snap = ix.snapshot();
  ASSERT_EQ(snap.contended.size(), 2u);
  const auto s = analyze_snapshot(snap, AnalyzeOptions{now});
  const auto cs2 = cycle_candidates(s.graph.cycles().at(0), s);
  ASSERT_EQ(cs2.size(), 2u);
  EXPECT_EQ(cs2[0].held, 2u);
  EXPECT_EQ(cs2[1].held, 1u);
  EXPECT_EQ(cs2[0].czxid, 30);
  EXPECT_EQ(cs2[0].priority, 7);
  EXPECT_EQ(cs2[choose_victim(cs2, {Policy::most_held})].owner, "A");
  EXPECT_EQ(cs2[choose_victim(cs2, {Policy::fewest_held})].owner, "B");
}

}  // namespace
}  // namespace zklock::detector
