// The detector's scan alone: the mirror's lock index (model::LockIndex)
// filled in memory as the mirror fills it (names first, node data only for
// queues of two or more), then timed scans as the daemon runs them:
// snapshot, analysis, cycles. No server is involved, so the figure is the
// scan's own CPU with the tree held still; the `detector` scenario times the
// daemon's whole scan_once() over a real mirror.
#include <malloc.h>

#include <cstdio>
#include <stdexcept>

#include "model/lock_index.hpp"
#include "model/lock_queue.hpp"
#include "scenarios.hpp"
#include "zklock/protocol/node_name.hpp"

namespace zklock::bench {
namespace {

constexpr std::int64_t kNowMs = 1'700'000'000'000;

std::string guid(unsigned n) {
  char g[33];
  std::snprintf(g, sizeof g, "%032x", n);
  return g;
}

// A node named as zklock names it; read (as the mirror reads contended
// queues' nodes) when `read`.
void add(model::LockIndex& ix, const std::string& lock, const std::string& owner, std::int32_t seq, bool read,
         unsigned& serial, std::int64_t& czxid) {
  char sq[16];
  std::snprintf(sq, sizeof sq, "%010d", seq);
  auto n = model::queue_node_from_name(
      protocol::lock_node_prefix(Mode::exclusive, protocol::owner_key(owner), guid(++serial)) + sq);
  if (!n) throw std::logic_error("detector scan: a planted name did not parse");
  const auto name = n->name;
  ix.insert(lock, std::move(*n));
  if (read) ix.set_read(lock, name, ++czxid, kNowMs - 10'000 + seq, owner, 0);
}

}  // namespace

Figures detector_scan(const Env& env, const Sizes& s) {
  const int held = s.detector_dirs * s.detector_locks_per_dir;
  const int contended = s.detector_scan_contended;
  // The index's heap: bytes in use by malloc before and after filling it.
  const auto heap0 = mallinfo2().uordblks;
  model::LockIndex ix;
  unsigned serial = 0;
  std::int64_t czxid = 0;
  const std::string root = "/zklock/locks/bench/d";
  for (int i = 0; i < held; ++i) {
    const auto lock = root + std::to_string(i % s.detector_dirs) + "/l" + std::to_string(i / s.detector_dirs);
    add(ix, lock, "holder-" + std::to_string(i), 1, false, serial, czxid);
  }
  // Each contended queue: a holder and a waiter of its own, both read.
  for (int c = 0; c < contended; ++c) {
    const auto lock = root + "hot/h" + std::to_string(c);
    add(ix, lock, "hot-holder-" + std::to_string(c), 1, true, serial, czxid);
    add(ix, lock, "hot-waiter-" + std::to_string(c), 2, true, serial, czxid);
  }
  // Two-owner cycles: each owner holds one lock and waits for the other's.
  for (int c = 0; c < s.detector_cycles; ++c) {
    const auto x = root + "cycles/c" + std::to_string(c) + "-x", y = root + "cycles/c" + std::to_string(c) + "-y";
    const auto a = "c" + std::to_string(c) + "-a", b = "c" + std::to_string(c) + "-b";
    add(ix, x, a, 1, true, serial, czxid);
    add(ix, y, b, 1, true, serial, czxid);
    add(ix, y, a, 2, true, serial, czxid);
    add(ix, x, b, 2, true, serial, czxid);
  }
  const double heap_per_lock =
      static_cast<double>(mallinfo2().uordblks - heap0) / static_cast<double>(ix.queue_count());
  env.log("detector scan: " + std::to_string(ix.queue_count()) + " queues, " + std::to_string(ix.snapshot().contended.size()) +
          " with two or more nodes");

  model::AnalyzeOptions opts{kNowMs, std::chrono::milliseconds(1000)};
  std::vector<double> scan_ms;
  const int scans = env.quick ? 50 : 500;
  std::size_t cycles = 0;
  for (int i = 0; i < scans; ++i) {
    const auto a = Clock::now();
    const auto analysis = model::analyze_snapshot(ix.snapshot(), opts);
    cycles = analysis.graph.cycles().size();
    scan_ms.push_back(seconds(Clock::now() - a) * 1e3);
  }
  if (cycles != static_cast<std::size_t>(s.detector_cycles)) {
    throw std::runtime_error("detector scan found " + std::to_string(cycles) + " cycles, planted " +
                             std::to_string(s.detector_cycles));
  }
  const std::string sc = "detector scan (" + std::to_string(held) + " held alone, " + std::to_string(contended) +
                         " contended queues, " + std::to_string(s.detector_cycles) + " cycles; in memory)";
  return {
      {sc, "scan p50", "ms", median(scan_ms), kNone, Target::value_le(0.5)},
      {sc, "scan p99", "ms", percentile(scan_ms, 99), kNone, {}},
      {sc, "scan max", "ms", *std::max_element(scan_ms.begin(), scan_ms.end()), kNone, {}},
      {sc, "index heap per lock path", "B", heap_per_lock, kNone, {}},
  };
}

}  // namespace zklock::bench
