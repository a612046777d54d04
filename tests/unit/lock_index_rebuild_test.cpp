// The lock index kept by events equals the index rebuilt from the whole
// tree, after every event; and a scan over the index finds what a full
// analysis of every queue finds, on large and malformed trees.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <random>

#include "model/lock_index.hpp"
#include "model/lock_queue.hpp"

namespace zklock::model {
namespace {

constexpr std::int64_t kNow = 1'700'000'000'000;
const AnalyzeOptions kOptions{kNow, std::chrono::seconds(1), 1'000'000};

QueueNode named(const std::string& owner, std::int32_t seq, Mode mode, unsigned& guid) {
  char g[33], sq[16];
  std::snprintf(g, sizeof g, "%032x", ++guid);
  std::snprintf(sq, sizeof sq, "%010d", seq);
  auto n = queue_node_from_name(protocol::lock_node_prefix(mode, protocol::owner_key(owner), g) + sq);
  EXPECT_TRUE(n.has_value());
  return *n;
}

using Tree = std::map<std::string, std::map<std::string, QueueNode>>;  // lock -> name -> node

LockIndex rebuild(const Tree& tree) {
  LockIndex ix;
  for (const auto& [lock, q] : tree) {
    for (const auto& [name, n] : q) {
      auto bare = *queue_node_from_name(name);  // what a listing gives
      ix.insert(lock, bare);
      if (n.czxid != 0) ix.set_read(lock, name, n.czxid, n.ctime_ms, n.owner, n.priority, n.gives_up_after_ms);
    }
  }
  return ix;
}

std::vector<LockQueue> sorted_contended(QueueSnapshot s) {
  for (auto& q : s.contended) {
    std::sort(q.nodes.begin(), q.nodes.end(), [](const QueueNode& a, const QueueNode& b) { return a.name < b.name; });
  }
  std::sort(s.contended.begin(), s.contended.end(),
            [](const LockQueue& a, const LockQueue& b) { return a.path < b.path; });
  return s.contended;
}

void expect_same_nodes(const std::vector<QueueNode>& a, const std::vector<QueueNode>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (std::size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].name, b[i].name);
    EXPECT_EQ(a[i].mode, b[i].mode);
    EXPECT_EQ(a[i].owner_key, b[i].owner_key);
    EXPECT_EQ(a[i].sequence, b[i].sequence);
    EXPECT_EQ(a[i].owner, b[i].owner);
    EXPECT_EQ(a[i].priority, b[i].priority);
    EXPECT_EQ(a[i].czxid, b[i].czxid);
    EXPECT_EQ(a[i].ctime_ms, b[i].ctime_ms);
    EXPECT_EQ(a[i].gives_up_after_ms, b[i].gives_up_after_ms);
  }
}

std::vector<std::string> lone_paths(const LockIndex& ix, const std::string& key) {
  std::vector<std::string> out;
  for (const auto& n : ix.lone_nodes(key)) out.push_back(n.path + "@" + std::to_string(n.czxid));
  std::sort(out.begin(), out.end());
  return out;
}

// Everything a scan or a revocation reads from the index.
void expect_same_index(const LockIndex& kept, const LockIndex& rebuilt, const std::vector<std::string>& keys) {
  EXPECT_EQ(kept.node_count(), rebuilt.node_count());
  EXPECT_EQ(kept.queue_count(), rebuilt.queue_count());
  const auto a = kept.snapshot(), b = rebuilt.snapshot();
  EXPECT_EQ(a.lone_queues, b.lone_queues);
  const auto qa = sorted_contended(a), qb = sorted_contended(b);
  ASSERT_EQ(qa.size(), qb.size());
  for (std::size_t i = 0; i < qa.size(); ++i) {
    ASSERT_EQ(qa[i].path, qb[i].path);
    expect_same_nodes(qa[i].nodes, qb[i].nodes);
  }
  ASSERT_EQ(a.keys.size(), b.keys.size());
  for (const auto& [key, facts] : a.keys) {
    ASSERT_TRUE(b.keys.count(key)) << key;
    EXPECT_EQ(facts.owner, b.keys.at(key).owner) << key;
    EXPECT_EQ(facts.held_alone, b.keys.at(key).held_alone) << key;
  }
  for (const auto& key : keys) EXPECT_EQ(lone_paths(kept, key), lone_paths(rebuilt, key)) << key;
}

void expect_same_scan(const LockIndex& ix, const std::vector<LockQueue>& every_queue) {
  const auto full = analyze_queues(every_queue, kOptions);
  const auto scan = analyze_snapshot(ix.snapshot(), kOptions);
  EXPECT_EQ(scan.graph.waits(), full.graph.waits());
  EXPECT_EQ(scan.graph.cycles(), full.graph.cycles());
  EXPECT_EQ(scan.locks, full.locks);
  EXPECT_EQ(scan.holders, full.holders);
  EXPECT_EQ(scan.waiters, full.waiters);
  EXPECT_EQ(scan.abandoned, full.abandoned);
  EXPECT_EQ(scan.oldest_wait_ms, full.oldest_wait_ms);
}

TEST(LockIndexRebuild, AfterEveryEventTheKeptIndexEqualsARebuildAndScansAgree) {
  const std::vector<std::string> owners{"A", "B", "C", "D", "host/1/w", "host/2/w"};
  std::vector<std::string> keys;
  for (const auto& o : owners) keys.push_back(protocol::owner_key(o));
  for (unsigned seed = 1; seed <= 20; ++seed) {
    SCOPED_TRACE("seed " + std::to_string(seed));
    std::mt19937 rng(seed);
    auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<unsigned>(n)); };
    LockIndex ix;
    Tree tree;
    std::map<std::string, std::int32_t> next_seq;
    std::int64_t czxid = 100;
    unsigned guid = 0;
    const int locks = 2 + pick(6);
    for (int step = 0; step < 250; ++step) {
      const auto lock = "/locks/l" + std::to_string(pick(locks));
      auto& q = tree[lock];
      const int op = pick(10);
      if (op < 5 || q.empty()) {  // a listing shows a new node
        const auto mode = pick(3) == 0 ? Mode::shared : Mode::exclusive;
        auto n = named(owners[pick(static_cast<int>(owners.size()))], ++next_seq[lock], mode, guid);
        ASSERT_TRUE(ix.insert(lock, n));
        q.emplace(n.name, n);
      } else if (op < 8) {  // a read completes: valid, bad or forged data, maybe a stated timeout
        auto& n = std::next(q.begin(), pick(static_cast<int>(q.size())))->second;
        std::string owner;
        for (const auto& o : owners) {
          if (protocol::owner_key(o) == n.owner_key) owner = o;
        }
        if (pick(4) == 0) owner = pick(2) ? "forged" : "";
        n.czxid = ++czxid;
        n.ctime_ms = kNow - pick(4000);
        n.owner = owner;
        n.priority = pick(3);
        n.gives_up_after_ms = pick(4) == 0 ? pick(3000) : 0;
        ix.set_read(lock, n.name, n.czxid, n.ctime_ms, n.owner, n.priority, n.gives_up_after_ms);
      } else {  // a listing no longer shows a node
        auto it = std::next(q.begin(), pick(static_cast<int>(q.size())));
        ix.erase(lock, it->first);
        q.erase(it);
      }
      if (q.empty()) tree.erase(lock);
      SCOPED_TRACE("step " + std::to_string(step));
      ASSERT_NO_FATAL_FAILURE(expect_same_index(ix, rebuild(tree), keys));
      ASSERT_NO_FATAL_FAILURE(expect_same_scan(ix, ix.queues()));
      if (HasFailure()) return;
    }
  }
}

// 50,000 locks held alone, 100 queues with a waiter, 10 cycles, and junk:
// foreign child names (never entered), nodes whose data is bad or names
// another owner, an abandoned wait, shared holders together.
TEST(LockIndexRebuild, ScanOfLargeTreeWithJunkFindsTheSameCyclesAsAFullAnalysis) {
  LockIndex ix;
  std::vector<LockQueue> every;
  unsigned guid = 0;
  std::int64_t czxid = 0;
  auto add = [&](const std::string& lock, const std::string& owner, std::int32_t seq, Mode mode, bool read,
                 std::string data_owner, std::int64_t gives_up = 0) {
    auto n = named(owner, seq, mode, guid);
    ix.insert(lock, n);
    if (read) {
      n.czxid = ++czxid;
      n.ctime_ms = kNow - 10'000 + seq;
      n.owner = std::move(data_owner);
      n.gives_up_after_ms = gives_up;
      ix.set_read(lock, n.name, n.czxid, n.ctime_ms, n.owner, 0, gives_up);
    }
    if (every.empty() || every.back().path != lock) every.push_back({lock, {}});
    every.back().nodes.push_back(n);
  };
  for (int i = 0; i < 50'000; ++i) add("/r/d" + std::to_string(i % 100) + "/l" + std::to_string(i), "h" + std::to_string(i % 7000), 1, Mode::exclusive, false, "");
  for (int c = 0; c < 100; ++c) {
    const auto lock = "/r/hot/h" + std::to_string(c);
    const auto holder = "h" + std::to_string(c);  // also holds lone locks above
    add(lock, holder, 1, Mode::exclusive, true, c % 10 == 0 ? "forged" : holder);
    add(lock, "w" + std::to_string(c), 2, Mode::exclusive, true, c % 9 == 0 ? "" : "w" + std::to_string(c),
        c % 13 == 0 ? 1 : 0);  // some abandoned
  }
  for (int c = 0; c < 3; ++c) {  // shared holders together: two nodes, no waiter
    const auto lock = "/r/shared/s" + std::to_string(c);
    add(lock, "r" + std::to_string(c), 1, Mode::shared, true, "r" + std::to_string(c));
    add(lock, "q" + std::to_string(c), 2, Mode::shared, true, "q" + std::to_string(c));
  }
  for (int c = 0; c < 10; ++c) {
    const auto x = "/r/cycles/c" + std::to_string(c) + "-x", y = "/r/cycles/c" + std::to_string(c) + "-y";
    const auto a = "c" + std::to_string(c) + "-a", b = "c" + std::to_string(c) + "-b";
    add(x, a, 1, Mode::exclusive, true, a);
    add(x, b, 2, Mode::exclusive, true, c == 0 ? "" : b);  // one waiter named by its key only
    add(y, b, 1, Mode::exclusive, true, b);
    add(y, a, 2, Mode::exclusive, true, a);
  }
  for (const auto* junk : {"lock", "x_notakey_1", "r_0123456789abcdef_", "zookeeper"}) {
    EXPECT_FALSE(queue_node_from_name(junk).has_value()) << junk;  // the mirror never enters these
  }
  ASSERT_EQ(ix.queue_count(), every.size());
  EXPECT_EQ(ix.snapshot().contended.size(), 100u + 3u + 20u);
  const auto full = analyze_queues(every, kOptions);
  const auto scan = analyze_snapshot(ix.snapshot(), kOptions);
  EXPECT_EQ(scan.graph.cycles().size(), 10u);
  EXPECT_EQ(scan.graph.cycles(), full.graph.cycles());
  EXPECT_EQ(scan.graph.waits(), full.graph.waits());
  EXPECT_EQ(scan.locks, full.locks);
  EXPECT_EQ(scan.holders, full.holders);
  EXPECT_EQ(scan.waiters, full.waiters);
  EXPECT_EQ(scan.abandoned, full.abandoned);
  for (const auto& [owner, info] : scan.owners) {
    ASSERT_TRUE(full.owners.count(owner)) << owner;
    EXPECT_EQ(info.held_count(), full.owners.at(owner).held_count()) << owner;
  }
}

}  // namespace
}  // namespace zklock::model
