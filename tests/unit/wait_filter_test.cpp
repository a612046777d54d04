// A scan keeps only the waits inside a strongly connected component of
// owners (AnalyzeOptions::Waits::on_cycles); its cycles are the same as
// with every wait, on random queues with shared and exclusive nodes, young
// and abandoned waits, owners waiting behind themselves and cut edges.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "model/lock_queue.hpp"
#include "model/wait_for_graph.hpp"
#include "zklock/protocol/node_name.hpp"

namespace zklock::model {
namespace {

constexpr std::int64_t kNow = 1'700'000'000'000;

std::vector<LockQueue> random_queues(std::mt19937_64& rng) {
  const auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<std::uint64_t>(n)); };
  const int locks = 2 + pick(7), owners = 2 + pick(6);
  std::vector<LockQueue> out;
  unsigned guid = 0;
  std::int64_t czxid = 100;
  for (int l = 0; l < locks; ++l) {
    LockQueue q{"/locks/l" + std::to_string(l), {}};
    const int nodes = 1 + pick(7);
    for (int k = 0; k < nodes; ++k) {
      const auto mode = pick(4) == 0 ? Mode::shared : Mode::exclusive;
      const auto owner = "o" + std::to_string(pick(owners));
      char g[33], sq[16];
      std::snprintf(g, sizeof g, "%032x", ++guid);
      std::snprintf(sq, sizeof sq, "%010d", k);
      auto n = *queue_node_from_name(protocol::lock_node_prefix(mode, protocol::owner_key(owner), g) + sq);
      n.owner = owner;
      n.czxid = ++czxid;
      n.ctime_ms = pick(8) == 0 ? 0 : kNow - pick(3000);  // unknown, young or past min-wait
      if (pick(6) == 0) n.gives_up_after_ms = 1 + pick(100);  // an abandoned wait, once old enough
      q.nodes.push_back(std::move(n));
    }
    out.push_back(std::move(q));
  }
  return out;
}

std::vector<std::string> cycle_texts(const WaitAnalysis& a) {
  std::vector<std::string> out;
  for (const auto& c : a.graph.cycles()) out.push_back(cycle_json(c).dump());
  return out;
}

TEST(WaitFilter, TheCyclesOfTheWaitsOnCyclesAreTheCyclesOfEveryWait) {
  std::mt19937_64 rng(20261208);
  int with_cycles = 0, fewer_waits = 0;
  for (int round = 0; round < 3000; ++round) {
    const auto queues = random_queues(rng);
    AnalyzeOptions all{kNow, std::chrono::milliseconds(1000)};
    all.abandon_skew = std::chrono::milliseconds(0);
    all.max_queue_edges = round % 5 == 0 ? 3 : 1'000'000;
    auto cyclic = all;
    cyclic.waits = AnalyzeOptions::Waits::on_cycles;
    const auto a = analyze_queues(queues, all), b = analyze_queues(queues, cyclic);
    ASSERT_EQ(cycle_texts(a), cycle_texts(b)) << "round " << round;
    EXPECT_EQ(a.truncated_waiters, b.truncated_waiters);
    EXPECT_EQ(a.waiters, b.waiters);
    const auto wa = a.graph.waits(), wb = b.graph.waits();
    std::set<std::string> every;
    for (const auto& w : wa) every.insert(wait_json(w).dump());
    for (const auto& w : wb) EXPECT_TRUE(every.count(wait_json(w).dump())) << "a wait the full graph does not have";
    with_cycles += a.graph.cycles().empty() ? 0 : 1;
    fewer_waits += wb.size() < wa.size() ? 1 : 0;
  }
  std::printf("[ filter   ] 3000 rounds: %d with cycles, %d with waits left out\n", with_cycles, fewer_waits);
  EXPECT_GT(with_cycles, 300) << "the random trees must exercise cycles";
  EXPECT_GT(fewer_waits, 300) << "and waits outside any cycle";
}

}  // namespace
}  // namespace zklock::model
