// Abandoned waits: a waiting node whose data
// states a timeout, older than that timeout plus the skew allowance, is no
// wait: it can close no cycle. The node data field that states it, and the
// analysis over queues, the mirror's index and the CLI alike.
#include <gtest/gtest.h>

#include <chrono>

#include "model/lock_index.hpp"
#include "model/lock_queue.hpp"
#include "zklock/protocol/node_data.hpp"
#include "zklock/protocol/node_name.hpp"

namespace zklock::model {
namespace {

using std::chrono::milliseconds;

constexpr std::int64_t kNow = 1'700'000'000'000;
constexpr std::int64_t kOld = kNow - 10'000;  // past the 1 s min-wait

QueueNode w(const std::string& owner, std::int32_t seq, std::int64_t gives_up_after_ms = 0,
            std::int64_t ctime = kOld) {
  QueueNode n;
  n.owner = owner;
  n.owner_key = protocol::owner_key(owner);
  n.sequence = seq;
  n.name = protocol::lock_node_prefix(Mode::exclusive, n.owner_key, std::string(32, 'a' + seq % 6)) +
           std::to_string(seq);
  n.czxid = 1000 + seq;
  n.ctime_ms = ctime;
  n.gives_up_after_ms = gives_up_after_ms;
  return n;
}

AnalyzeOptions opts(milliseconds skew = milliseconds(2000)) {
  AnalyzeOptions o{kNow, milliseconds(1000)};
  o.abandon_skew = skew;
  return o;
}

// A holds x and waits for y, its wait stating `a_gives_up`; B holds y and
// waits for x without a timeout.
std::vector<LockQueue> cross(std::int64_t a_gives_up) {
  return {{"/locks/x", {w("A", 1), w("B", 2)}}, {"/locks/y", {w("B", 1), w("A", 2, a_gives_up)}}};
}

TEST(AbandonedWait, AWaitPastItsTimeoutAndTheSkewClosesNoCycle) {
  // 10 s old, gave up after 3 s, 2 s allowance: abandoned 5 s ago.
  const auto a = analyze_queues(cross(3000), opts());
  EXPECT_TRUE(a.graph.cycles().empty());
  EXPECT_EQ(a.abandoned, 1u);
  EXPECT_EQ(a.waiters, 2u) << "it still stands in the queue";
  const auto& node = a.nodes.at(node_path("/locks/y", w("A", 2).name));
  EXPECT_TRUE(node.abandoned);
  EXPECT_FALSE(node.holds);
  // B's real wait for A remains an edge: B waits until A's node goes.
  ASSERT_EQ(a.graph.waits().size(), 1u);
  EXPECT_EQ(a.graph.waits()[0].waiter, "B");
}

TEST(AbandonedWait, ALiveTimedWaitStillClosesTheCycle) {
  // 10 s old, gives up after 60 s: still waiting.
  const auto a = analyze_queues(cross(60'000), opts());
  ASSERT_EQ(a.graph.cycles().size(), 1u);
  EXPECT_EQ(cycle_text(a.graph.cycles()[0]), "A -[/locks/y]-> B -[/locks/x]-> A");
  EXPECT_EQ(a.abandoned, 0u);
}

TEST(AbandonedWait, TheSkewAllowanceKeepsAJustExpiredWaitLive) {
  // Past its 9 s timeout by 1 s, inside the 2 s allowance: counts.
  EXPECT_EQ(analyze_queues(cross(9000), opts()).graph.cycles().size(), 1u);
  // With no allowance it is abandoned.
  EXPECT_TRUE(analyze_queues(cross(9000), opts(milliseconds(0))).graph.cycles().empty());
}

TEST(AbandonedWait, ANodeWithoutTheFieldStaysLive) {
  // No timeout stated (a wait without one, or an older client's node): it
  // waits however old it is.
  const auto a = analyze_queues(cross(0), opts(milliseconds(0)));
  EXPECT_EQ(a.graph.cycles().size(), 1u);
  EXPECT_EQ(a.abandoned, 0u);
  // An unknown ctime is never abandoned either.
  auto unknown = w("A", 2, 1);
  unknown.ctime_ms = 0;
  EXPECT_FALSE(abandoned_wait(unknown, kNow, milliseconds(0)));
  // A huge stated timeout does not overflow into "abandoned".
  EXPECT_FALSE(abandoned_wait(w("A", 2, INT64_MAX), kNow, milliseconds(INT64_MAX / 2)));
}

TEST(AbandonedWait, AHolderIsNeverAbandoned) {
  // A node that holds keeps its edges towards it whatever its data says.
  std::vector<LockQueue> qs{{"/locks/x", {w("A", 1, 1), w("B", 2)}}, {"/locks/y", {w("B", 1), w("A", 2)}}};
  const auto a = analyze_queues(qs, opts(milliseconds(0)));
  EXPECT_EQ(a.graph.cycles().size(), 1u);
  EXPECT_FALSE(a.nodes.at(node_path("/locks/x", w("A", 1).name)).abandoned);
}

TEST(AbandonedWait, TheMirrorsIndexCarriesTheStatedTimeout) {
  LockIndex index;
  for (const auto& q : cross(0)) {
    for (const auto& n : q.nodes) {
      auto bare = *queue_node_from_name(n.name);
      index.insert(q.path, bare);
      index.set_read(q.path, n.name, n.czxid, n.ctime_ms, n.owner, 0,
                     q.path == "/locks/y" && n.owner == "A" ? 3000 : 0);
    }
  }
  EXPECT_TRUE(analyze_snapshot(index.snapshot(), opts()).graph.cycles().empty());
  EXPECT_EQ(analyze_snapshot(index.snapshot(), opts(milliseconds(60'000))).graph.cycles().size(), 1u);
}

TEST(AbandonedWait, NodeDataStatesTheTimeoutOnlyWhenThereIsOne) {
  protocol::NodeData d{.owner = "h/1/2", .host = "h", .pid = 1};
  EXPECT_EQ(protocol::encode_node_data(d).find("gives_up_after_ms"), std::string::npos);
  EXPECT_EQ(protocol::decode_node_data(protocol::encode_node_data(d))->gives_up_after_ms, 0);
  d.gives_up_after_ms = 1500;
  const auto text = protocol::encode_node_data(d);
  EXPECT_NE(text.find("\"gives_up_after_ms\":1500"), std::string::npos) << text;
  EXPECT_EQ(protocol::decode_node_data(text)->gives_up_after_ms, 1500);
  // A negative or non-integer value is malformed data, like any bad field.
  EXPECT_FALSE(protocol::decode_node_data(R"({"owner":"h/1/2","gives_up_after_ms":-1})"));
  EXPECT_FALSE(protocol::decode_node_data(R"({"owner":"h/1/2","gives_up_after_ms":"soon"})"));
  // An over-long description still makes room for it within 256 bytes.
  d.description = std::string(400, 'x');
  const auto full = protocol::encode_node_data(d);
  EXPECT_LE(full.size(), protocol::kMaxNodeDataBytes);
  EXPECT_EQ(protocol::decode_node_data(full)->gives_up_after_ms, 1500);
}

}  // namespace
}  // namespace zklock::model
