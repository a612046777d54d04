// The detectors' election order (model/election_order.hpp) and candidate
// names (zklock/protocol/paths.hpp).
#include "model/election_order.hpp"

#include <gtest/gtest.h>

#include <climits>
#include <map>
#include <string>

namespace zklock::model {
namespace {

TEST(ElectionOrder, ParsesCandidateNames) {
  const auto c = protocol::parse_election_candidate("c_0123abcd_0000000007");
  ASSERT_TRUE(c);
  EXPECT_EQ(c->guid, "0123abcd");
  EXPECT_EQ(c->sequence, 7);
  EXPECT_EQ(protocol::parse_election_candidate("c_g_-2147483648")->sequence, INT32_MIN);
  EXPECT_FALSE(protocol::parse_election_candidate("x_g_1"));
  EXPECT_FALSE(protocol::parse_election_candidate("c__1"));
  EXPECT_FALSE(protocol::parse_election_candidate("c_g_"));
  EXPECT_FALSE(protocol::parse_election_candidate("c_g_2147483648"));
  EXPECT_EQ(election_candidates({"c_a_0000000002", "foreign", "c_b_0000000001"}).size(), 2u);
}

TEST(ElectionOrder, SuffixOrderWhenUnambiguous) {
  auto cs = election_candidates({"c_b_0000000010", "c_a_0000000002"});
  EXPECT_TRUE(election_czxids_needed(cs).empty());
  EXPECT_TRUE(sort_election(cs));
  EXPECT_EQ(cs.front().guid, "a");
}

TEST(ElectionOrder, CzxidOrderAtTheCountersEnd) {
  // A later candidate at a saturated counter: same suffix, larger czxid.
  auto cs = election_candidates({"c_b_2147483647", "c_a_2147483647", "c_c_-2147483648"});
  EXPECT_EQ(election_czxids_needed(cs).size(), 3u);
  EXPECT_FALSE(sort_election(cs));  // unknown czxids: not exact
  const std::map<std::string, std::int64_t> czxid{{"a", 4}, {"b", 9}, {"c", 5}};
  for (auto& c : cs) {
    if (c.guid != "c") c.czxid = czxid.at(c.guid);
  }
  EXPECT_EQ(election_czxids_needed(cs).size(), 1u);
  EXPECT_FALSE(sort_election(cs));
  EXPECT_EQ(cs.back().guid, "c");  // unknown czxid: last, never first
  for (auto& c : cs) c.czxid = czxid.at(c.guid);
  EXPECT_TRUE(sort_election(cs));
  EXPECT_EQ(cs[0].guid, "a");
  EXPECT_EQ(cs[1].guid, "c");
  EXPECT_EQ(cs[2].guid, "b");
}

}  // namespace
}  // namespace zklock::model
