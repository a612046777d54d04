#include "model/lock_index.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>

#include "model/lock_queue.hpp"

namespace zklock::model {
namespace {

constexpr std::int64_t kNow = 1'700'000'000'000;
const AnalyzeOptions kOptions{kNow, std::chrono::seconds(1), 1'000'000};

// A node of `owner` as the mirror first sees it: from its name only.
QueueNode named(const std::string& owner, std::int32_t seq, Mode mode = Mode::exclusive) {
  static unsigned guid = 0;
  char g[33], sq[16];
  std::snprintf(g, sizeof g, "%032x", ++guid);
  std::snprintf(sq, sizeof sq, "%010d", seq);
  auto n = queue_node_from_name(protocol::lock_node_prefix(mode, protocol::owner_key(owner), g) + sq);
  EXPECT_TRUE(n.has_value());
  return *n;
}

std::vector<std::string> sorted_paths(const std::vector<LoneNode>& v) {
  std::vector<std::string> out;
  for (const auto& n : v) out.push_back(n.path);
  std::sort(out.begin(), out.end());
  return out;
}

TEST(LockIndex, QueueEntersAndLeavesTheContendedSetWithItsSecondNode) {
  LockIndex ix;
  const auto a = named("A", 1), b = named("B", 2);
  ASSERT_TRUE(ix.insert("/locks/x", a));
  EXPECT_FALSE(ix.insert("/locks/x", a));  // same name again: no change
  EXPECT_EQ(ix.node_count(), 1u);
  auto s = ix.snapshot();
  EXPECT_TRUE(s.contended.empty());
  EXPECT_EQ(s.lone_queues, 1u);
  EXPECT_EQ(sorted_paths(ix.lone_nodes(protocol::owner_key("A"))), (std::vector<std::string>{"/locks/x/" + a.name}));

  ASSERT_TRUE(ix.insert("/locks/x", b));
  s = ix.snapshot();
  ASSERT_EQ(s.contended.size(), 1u);
  EXPECT_EQ(s.contended[0].path, "/locks/x");
  EXPECT_EQ(s.contended[0].nodes.size(), 2u);
  EXPECT_EQ(s.lone_queues, 0u);
  EXPECT_EQ(s.keys.size(), 2u);
  EXPECT_EQ(s.keys.at(protocol::owner_key("A")).held_alone, 0u);
  EXPECT_TRUE(ix.lone_nodes(protocol::owner_key("A")).empty());

  ix.erase("/locks/x", a.name);  // B is alone now, and holds
  s = ix.snapshot();
  EXPECT_TRUE(s.contended.empty());
  EXPECT_EQ(s.lone_queues, 1u);
  EXPECT_EQ(sorted_paths(ix.lone_nodes(protocol::owner_key("B"))), (std::vector<std::string>{"/locks/x/" + b.name}));
  EXPECT_TRUE(ix.lone_nodes(protocol::owner_key("A")).empty());

  ix.erase("/locks/x", b.name);
  ix.erase("/locks/x", b.name);  // absent: no effect
  EXPECT_EQ(ix.node_count(), 0u);
  EXPECT_EQ(ix.queue_count(), 0u);
  EXPECT_EQ(ix.snapshot().lone_queues, 0u);
}

TEST(LockIndex, KeyFactsCoverLoneNodesOfOwnersInContendedQueues) {
  LockIndex ix;
  // A holds /locks/a and /locks/b alone and waits on /locks/x behind B; the
  // waiting node's data is bad, so only A's lone nodes name its owner.
  auto a1 = named("A", 1), a2 = named("A", 1), ax = named("A", 2), bx = named("B", 1);
  ix.insert("/locks/a", a1);
  ix.insert("/locks/b", a2);
  ix.insert("/locks/x", bx);
  ix.insert("/locks/x", ax);
  ix.set_read("/locks/a", a1.name, 10, kNow - 9000, "A", 0);
  ix.set_read("/locks/b", a2.name, 11, kNow - 9000, "A", 0);
  ix.set_read("/locks/x", bx.name, 12, kNow - 9000, "B", 0);
  ix.set_read("/locks/x", ax.name, 13, kNow - 5000, "", 0);  // bad data
  const auto s = ix.snapshot();
  EXPECT_EQ(s.keys.at(protocol::owner_key("A")).owner, "A");
  EXPECT_EQ(s.keys.at(protocol::owner_key("A")).held_alone, 2u);
  const auto an = analyze_snapshot(s, kOptions);
  ASSERT_EQ(an.graph.wait_count(), 1u);
  EXPECT_EQ(an.graph.waits()[0].waiter, "A");
  EXPECT_EQ(an.owners.at("A").held_count(), 2u);
  EXPECT_EQ(an.owners.at("A").owner_key, protocol::owner_key("A"));
  EXPECT_EQ(an.locks, 3u);
  EXPECT_EQ(an.holders, 3u);
  EXPECT_EQ(an.waiters, 1u);
  // Once A's valid nodes are gone its name falls back to the key.
  ix.erase("/locks/a", a1.name);
  ix.erase("/locks/b", a2.name);
  EXPECT_EQ(analyze_snapshot(ix.snapshot(), kOptions).graph.waits()[0].waiter, "owner-key:" + protocol::owner_key("A"));
}

// The reference: the same queues kept in a plain map.
using Model = std::map<std::string, std::map<std::string, QueueNode>>;

std::vector<LockQueue> model_queues(const Model& m) {
  std::vector<LockQueue> out;
  for (const auto& [lock, q] : m) {
    LockQueue lq{lock, {}};
    for (const auto& [name, n] : q) lq.nodes.push_back(n);
    out.push_back(std::move(lq));
  }
  return out;
}

void expect_same_node(const NodeInfo& a, const NodeInfo& b) {
  EXPECT_EQ(a.path, b.path);
  EXPECT_EQ(a.lock, b.lock);
  EXPECT_EQ(a.owner, b.owner);
  EXPECT_EQ(a.mode, b.mode);
  EXPECT_EQ(a.holds, b.holds);
  EXPECT_EQ(a.priority, b.priority);
  EXPECT_EQ(a.czxid, b.czxid);
  EXPECT_EQ(a.ctime_ms, b.ctime_ms);
}

// analyze_snapshot(index.snapshot()) must equal analyze_queues() over every queue.
void expect_equivalent(const LockIndex& ix, const Model& model) {
  auto from_index = ix.queues();
  auto expected_queues = model_queues(model);
  ASSERT_EQ(from_index.size(), expected_queues.size());
  for (std::size_t i = 0; i < from_index.size(); ++i) {
    ASSERT_EQ(from_index[i].path, expected_queues[i].path);
    ASSERT_EQ(from_index[i].nodes.size(), expected_queues[i].nodes.size());
  }
  const auto full = analyze_queues(expected_queues, kOptions);
  const auto snap = analyze_snapshot(ix.snapshot(), kOptions);
  EXPECT_EQ(snap.graph.waits(), full.graph.waits());
  EXPECT_EQ(snap.graph.cycles(), full.graph.cycles());
  EXPECT_EQ(snap.locks, full.locks);
  EXPECT_EQ(snap.holders, full.holders);
  EXPECT_EQ(snap.waiters, full.waiters);
  EXPECT_EQ(snap.oldest_wait_ms, full.oldest_wait_ms);
  EXPECT_EQ(snap.truncated_waiters, full.truncated_waiters);
  for (const auto& [path, info] : snap.nodes) {
    ASSERT_TRUE(full.nodes.count(path)) << path;
    expect_same_node(info, full.nodes.at(path));
  }
  for (const auto& [owner, info] : full.owners) {
    auto it = snap.owners.find(owner);
    if (it == snap.owners.end()) {
      // Only owners whose every node is alone in its queue may be left out.
      EXPECT_TRUE(info.waiting.empty()) << owner;
      EXPECT_EQ(ix.lone_nodes(info.owner_key).size(), info.held.size()) << owner;
      continue;
    }
    EXPECT_EQ(it->second.held_count(), info.held_count()) << owner;
    EXPECT_EQ(it->second.waiting, info.waiting) << owner;
    EXPECT_EQ(it->second.owner_key, info.owner_key) << owner;
    // What `--mode all` deletes: the held nodes in the snapshot plus the lone ones.
    auto held = it->second.held;
    for (const auto& n : ix.lone_nodes(it->second.owner_key)) held.push_back(n.path);
    auto expected = info.held;
    std::sort(held.begin(), held.end());
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(held, expected) << owner;
  }
}

TEST(LockIndex, AnalysisOverTheIndexEqualsAnalysisOverEveryQueue) {
  const std::vector<std::string> owners{"A", "B", "C", "D", "E", "host/1/w", "host/2/w"};
  for (unsigned seed = 1; seed <= 30; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
    LockIndex ix;
    Model model;
    std::map<std::string, std::int32_t> next_seq;
    std::int64_t czxid = 100;
    const int locks = 2 + pick(8);
    for (int step = 0; step < 300; ++step) {
      const auto lock = "/locks/l" + std::to_string(pick(locks));
      auto& q = model[lock];
      const int op = pick(10);
      if (op < 5 || q.empty()) {  // a new node at the tail
        const auto mode = pick(3) == 0 ? Mode::shared : Mode::exclusive;
        auto n = named(owners[pick(static_cast<int>(owners.size()))], ++next_seq[lock], mode);
        ASSERT_TRUE(ix.insert(lock, n));
        q.emplace(n.name, n);
      } else if (op < 8) {  // a read completes (valid, bad or forged data)
        auto it = std::next(q.begin(), pick(static_cast<int>(q.size())));
        auto& n = it->second;
        const auto& owner = owners[pick(static_cast<int>(owners.size()))];
        std::string data_owner = protocol::owner_key(owner) == n.owner_key ? owner : "";
        if (data_owner.empty() && pick(2) == 0) {
          for (const auto& o : owners) {
            if (protocol::owner_key(o) == n.owner_key) data_owner = o;
          }
        }
        if (pick(5) == 0) data_owner = "forged";
        n.czxid = ++czxid;
        n.ctime_ms = kNow - pick(4000);  // some younger than min-wait
        n.owner = data_owner;
        n.priority = pick(3);
        ix.set_read(lock, n.name, n.czxid, n.ctime_ms, n.owner, n.priority);
      } else {  // a node goes away
        auto it = std::next(q.begin(), pick(static_cast<int>(q.size())));
        ix.erase(lock, it->first);
        q.erase(it);
      }
      if (q.empty()) model.erase(lock);
      ASSERT_EQ(ix.node_count(), [&] {
        std::size_t n = 0;
        for (const auto& [l, qq] : model) n += qq.size();
        return n;
      }());
      if (step % 25 == 24) expect_equivalent(ix, model);
    }
    expect_equivalent(ix, model);
  }
}

}  // namespace
}  // namespace zklock::model
