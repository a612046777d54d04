#include "zklock/protocol/node_name.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <vector>

#include "zklock/error.hpp"
#include "zklock/protocol/node_data.hpp"

namespace zklock {
namespace {

const std::string kKey = "0123456789abcdef";
const std::string kGuid = "0123456789abcdef0123456789abcdef";

TEST(NodeName, ParsesExclusiveAndShared) {
  auto w = protocol::parse_lock_node_name("w_" + kKey + "_" + kGuid + "_0000000042");
  ASSERT_TRUE(w);
  EXPECT_EQ(w->mode, Mode::exclusive);
  EXPECT_EQ(w->owner_key, kKey);
  EXPECT_EQ(w->guid, kGuid);
  EXPECT_EQ(w->sequence, 42);
  auto r = protocol::parse_lock_node_name("r_" + kKey + "_" + kGuid + "_2147483647");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->mode, Mode::shared);
  EXPECT_EQ(r->sequence, INT32_MAX);
}

TEST(NodeName, ParsesWrappedNegativeSuffixes) {
  auto n = protocol::parse_lock_node_name("w_" + kKey + "_" + kGuid + "_-2147483648");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->sequence, INT32_MIN);
  auto m = protocol::parse_lock_node_name("w_" + kKey + "_" + kGuid + "_-000000005");
  ASSERT_TRUE(m);
  EXPECT_EQ(m->sequence, -5);
}

TEST(NodeName, RejectsForeignNames) {
  const std::string good = "w_" + kKey + "_" + kGuid + "_";
  for (std::string bad : {std::string("lock-0000000001"), std::string("_c_abc-lock-0000000001"),
                          good, good + "x", good + "-", good + "12a", good + "2147483648",
                          good + "-2147483649", "x" + good.substr(1) + "1",
                          "w_" + kKey.substr(1) + "_" + kGuid + "_1",
                          "w_" + std::string(16, 'G') + "_" + kGuid + "_1",
                          "w_" + kKey + "_" + std::string(32, 'A') + "_1",
                          "w-" + kKey + "_" + kGuid + "_1", std::string()}) {
    EXPECT_FALSE(protocol::parse_lock_node_name(bad)) << bad;
  }
}

TEST(NodeName, PrefixRoundTrips) {
  const auto prefix = protocol::lock_node_prefix(Mode::shared, kKey, kGuid);
  auto n = protocol::parse_lock_node_name(prefix + "0000000007");
  ASSERT_TRUE(n);
  EXPECT_EQ(n->mode, Mode::shared);
  EXPECT_EQ(n->sequence, 7);
}

TEST(NodeName, GuidsAreHexAndDistinct) {
  auto a = protocol::new_guid(), b = protocol::new_guid();
  EXPECT_EQ(a.size(), 32u);
  EXPECT_NE(a, b);
  EXPECT_TRUE(protocol::parse_lock_node_name("w_" + kKey + "_" + a + "_1"));
}

TEST(Fnv1a64, KnownVectors) {
  // Published FNV-1a 64 test vectors: other-language clients must agree.
  EXPECT_EQ(protocol::fnv1a64(""), 0xcbf29ce484222325ULL);
  EXPECT_EQ(protocol::fnv1a64("a"), 0xaf63dc4c8601ec8cULL);
  EXPECT_EQ(protocol::fnv1a64("foobar"), 0x85944171f73967e8ULL);
  EXPECT_EQ(protocol::owner_key("a"), "af63dc4c8601ec8c");
}

TEST(SequenceOrder, OrdinaryAndAcrossTheWrap) {
  EXPECT_LT(protocol::compare_sequence(1, 2), 0);
  EXPECT_GT(protocol::compare_sequence(2, 1), 0);
  EXPECT_EQ(protocol::compare_sequence(5, 5), 0);
  EXPECT_LT(protocol::compare_sequence(INT32_MAX - 1, INT32_MAX), 0);
  EXPECT_LT(protocol::compare_sequence(INT32_MAX, INT32_MIN), 0);  // wraps forward
  EXPECT_GT(protocol::compare_sequence(INT32_MIN, INT32_MAX), 0);
  EXPECT_LT(protocol::compare_sequence(INT32_MAX - 3, INT32_MIN + 3), 0);
  EXPECT_LT(protocol::compare_sequence(-1, 0), 0);
  EXPECT_LT(protocol::compare_sequence(-2147483647, -2147483646), 0);
}

TEST(SequenceOrder, SortsAQueueThatCrossedTheWrap) {
  std::vector<std::int32_t> issued = {INT32_MAX - 2, INT32_MAX - 1, INT32_MAX, INT32_MIN,
                                      INT32_MIN + 1, INT32_MIN + 2};
  auto shuffled = issued;
  std::reverse(shuffled.begin(), shuffled.end());
  std::swap(shuffled[1], shuffled[4]);
  std::sort(shuffled.begin(), shuffled.end(),
            [](auto a, auto b) { return protocol::compare_sequence(a, b) < 0; });
  EXPECT_EQ(shuffled, issued);
}

TEST(LockPath, ValidatesAndExplains) {
  EXPECT_NO_THROW(validate_lock_path("/locks/invoice-42"));
  EXPECT_NO_THROW(validate_lock_path("/a"));
  for (const char* bad : {"", "locks/x", "/", "/locks/x/", "/locks//x", "/a/../b", "/a/./b",
                          "/zklock/x", "/zookeeper"}) {
    EXPECT_THROW(validate_lock_path(bad), Error) << bad;
  }
  try {
    validate_lock_path("bad//path");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::invalid_argument);
    EXPECT_NE(std::string(e.what()).find("bad//path"), std::string::npos);
  }
}

TEST(SplitPath, ParentAndName) {
  EXPECT_EQ(split_path("/a/b/c"), std::make_pair(std::string("/a/b"), std::string("c")));
  EXPECT_EQ(split_path("/a"), std::make_pair(std::string("/"), std::string("a")));
}

TEST(NodeData, RoundTripsAndStaysSmall) {
  protocol::NodeData d{.owner = "host/1/2", .host = "host", .pid = 1, .mode = Mode::shared,
             .priority = -3, .description = std::string(1000, 'x')};
  const auto bytes = protocol::encode_node_data(d);
  EXPECT_LE(bytes.size(), protocol::kMaxNodeDataBytes);
  auto back = protocol::decode_node_data(bytes);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->owner, "host/1/2");
  EXPECT_EQ(back->mode, Mode::shared);
  EXPECT_EQ(back->priority, -3);
  EXPECT_FALSE(back->description.empty());
}

TEST(NodeData, RejectsMalformed) {
  for (const char* bad : {"", "{", "[]", "{\"host\":\"h\"}", "{\"owner\":\"\"}",
                          "{\"owner\":\"o\",\"mode\":\"weird\"}", "{\"owner\":5}"}) {
    EXPECT_FALSE(protocol::decode_node_data(bad)) << bad;
  }
  EXPECT_FALSE(protocol::decode_node_data(std::string(300, ' ') + "{\"owner\":\"o\"}"));
  EXPECT_THROW(protocol::encode_node_data(protocol::NodeData{.owner = std::string(300, 'o')}), Error);
}

}  // namespace
}  // namespace zklock
