// Detector at scale: a planted lock tree (held locks, waiters, cycles) read
// by the detector library's Daemon (mirror + scan), in this process. The
// tree is planted with raw C-client creates in zklock's node layout, on one
// session whose close removes every lock node again.
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <fstream>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <spdlog/spdlog.h>

#include "detector/daemon.hpp"
#include "floor.hpp"
#include "listing_floor.hpp"
#include "platform_parts.hpp"
#include "scenarios.hpp"
#include "zklock/protocol/node_data.hpp"
#include "zklock/protocol/node_name.hpp"

namespace zklock::bench {
namespace {

using std::chrono::milliseconds;

double rss_mb() {
  std::ifstream in("/proc/self/status");
  std::string key;
  while (in >> key) {
    if (key == "VmRSS:") {
      double kb = 0;
      in >> kb;
      return kb / 1024.0;
    }
    in.ignore(1 << 12, '\n');
  }
  return kNone;
}

struct NodeSpec {
  std::string path;  // for lock nodes: the lock path + "/" + name prefix
  std::string data;
  int flags = 0;
};

// Pipelined creates on one raw session, in order; waits (bounded) for all.
// The context is leaked if the wait runs out (late completions stay safe).
void plant(FloorSession& s, const std::vector<NodeSpec>& specs) {
  struct Batch {
    std::mutex mu;
    std::condition_variable cv;
    std::size_t left = 0;
    int bad = ZOK;
  };
  auto* b = new Batch;
  b->left = specs.size();
  auto done = [](int rc, const char*, const void* data) {
    auto* b = static_cast<Batch*>(const_cast<void*>(data));
    std::lock_guard lk(b->mu);
    if (rc != ZOK && rc != ZNODEEXISTS) b->bad = rc;
    if (--b->left == 0) b->cv.notify_all();
  };
  for (const auto& sp : specs) {
    const int r = zoo_acreate(s.zh(), sp.path.c_str(), sp.data.data(), static_cast<int>(sp.data.size()),
                              &ZOO_OPEN_ACL_UNSAFE, sp.flags, done, b);
    if (r != ZOK) done(r, nullptr, b);
  }
  std::unique_lock lk(b->mu);
  if (!b->cv.wait_for(lk, milliseconds(600'000), [&] { return b->left == 0; })) {
    throw std::runtime_error("planting the detector tree timed out");
  }
  const int bad = b->bad;
  lk.unlock();
  delete b;
  if (bad != ZOK) throw std::runtime_error(std::string("planting the detector tree: ") + zerror(bad));
}

NodeSpec lock_node(const std::string& lock, const std::string& owner) {
  protocol::NodeData d;
  d.owner = owner;
  d.host = "bench";
  d.pid = ::getpid();
  return {lock + "/" + protocol::lock_node_prefix(Mode::exclusive, protocol::owner_key(owner), protocol::new_guid()), protocol::encode_node_data(d),
          ZOO_EPHEMERAL | ZOO_SEQUENCE};
}

// Two owners, each holding one lock and waiting for the other's.
void plant_cycle(FloorSession& s, const std::string& dir, const std::string& tag) {
  const auto x = dir + "/" + tag + "-x", y = dir + "/" + tag + "-y";
  plant(s, {{x, "", 0}, {y, "", 0}});
  plant(s, {lock_node(x, tag + "-a"), lock_node(y, tag + "-b")});
  plant(s, {lock_node(y, tag + "-a"), lock_node(x, tag + "-b")});
}

}  // namespace

Figures detector_at_scale(const Env& env, const Sizes& s) {
  const auto root = env.root + "/detector";
  FloorSession planter(env.connect, std::chrono::seconds(30));
  planter.ensure_path(root + "/cycles");
  planter.ensure_path(root + "/late");
  std::vector<NodeSpec> specs;
  for (int d = 0; d < s.detector_dirs; ++d) specs.push_back({root + "/d" + std::to_string(d), "", 0});
  for (int d = 0; d < s.detector_dirs; ++d) {
    for (int l = 0; l < s.detector_locks_per_dir; ++l) {
      specs.push_back({root + "/d" + std::to_string(d) + "/l" + std::to_string(l), "", 0});
    }
  }
  env.log("detector: planting " + std::to_string(s.detector_dirs * s.detector_locks_per_dir) + " held locks");
  plant(planter, specs);
  specs.clear();
  for (int d = 0; d < s.detector_dirs; ++d) {
    for (int l = 0; l < s.detector_locks_per_dir; ++l) {
      const auto lock = root + "/d" + std::to_string(d) + "/l" + std::to_string(l);
      specs.push_back(lock_node(lock, "holder-" + std::to_string(d) + "-" + std::to_string(l)));
    }
  }
  plant(planter, specs);
  specs.clear();
  for (int w = 0; w < s.detector_waiters; ++w) {
    const auto d = w % s.detector_dirs, l = (w / s.detector_dirs) % s.detector_locks_per_dir;
    const auto lock = root + "/d" + std::to_string(d) + "/l" + std::to_string(l);
    specs.push_back(lock_node(lock, "waiter-" + std::to_string(w)));
  }
  plant(planter, specs);
  for (int c = 0; c < s.detector_cycles; ++c) plant_cycle(planter, root + "/cycles", "c" + std::to_string(c));
  const auto expected_nodes = static_cast<std::size_t>(s.detector_dirs) * s.detector_locks_per_dir +
                              static_cast<std::size_t>(s.detector_waiters) + 4 * static_cast<std::size_t>(s.detector_cycles);
  settle(env);

  // The floor of the load, on the same tree just before it: a bare loader
  // listing every directory with a watch, on one session and on several.
  // A first pass is not counted: it pays the server's JIT warm-up.
  listing_floor(env, root, s.detector_floor_sessions);
  settle(env);
  const auto floor1 = listing_floor(env, root, 1);
  env.log("detector: listing floor, 1 session: " + std::to_string(floor1.listings) + " listings in " +
          std::to_string(floor1.seconds) + " s");
  settle(env);
  const auto floor_n = listing_floor(env, root, s.detector_floor_sessions);
  env.log("detector: listing floor, " + std::to_string(s.detector_floor_sessions) + " sessions: " +
          std::to_string(floor_n.seconds) + " s");
  settle(env);

  detector::DetectorConfig cfg;
  cfg.zk = env.connect;
  cfg.root = root;
  cfg.interval = milliseconds(1000);
  cfg.session_timeout = milliseconds(30'000);
  cfg.min_wait = milliseconds(500);
  cfg.resync_interval = std::chrono::hours(1);
  if (s.detector_inflight > 0) cfg.mirror_max_inflight = static_cast<std::size_t>(s.detector_inflight);
  if (s.detector_load_sessions > 0) cfg.mirror_load_sessions = static_cast<std::size_t>(s.detector_load_sessions);
  cfg.dry_run = true;  // report, never revoke: the planted cycles stay for every scan
  cfg.id = "zklock-bench";
  cfg.log = spdlog::default_logger();

  const double rss0 = rss_mb();
  const double cpu0 = process_cpu_seconds(), server_cpu0 = env.server_pid ? proc_cpu_seconds(env.server_pid) : kNone;
  const auto t0 = Clock::now();
  detector::Daemon daemon(cfg);
  const auto load_deadline = Clock::now() + milliseconds(600'000);
  while (!(daemon.mirror().idle() && daemon.mirror().stats().nodes >= expected_nodes)) {
    if (Clock::now() > load_deadline) throw std::runtime_error("detector mirror did not load the tree");
    std::this_thread::sleep_for(milliseconds(5));
  }
  const double load_s = seconds(Clock::now() - t0);
  const double load_cpu = process_cpu_seconds() - cpu0;
  const double load_server_cpu = env.server_pid ? proc_cpu_seconds(env.server_pid) - server_cpu0 : kNone;
  const auto sessions = daemon.mirror().stats().session_watch_bytes.size();
  const double rss_loaded = rss_mb();
  const auto load_ops = daemon.mirror().stats().ops_issued;
  const auto mirrored_paths = daemon.mirror().stats().dirs;  // lock paths and the directories above them
  env.log("detector: mirror loaded " + std::to_string(daemon.mirror().stats().nodes) + " nodes in " +
          std::to_string(load_s) + " s");

  std::this_thread::sleep_for(cfg.min_wait);  // every planted wait now counts
  settle(env);
  std::vector<double> scan_ms;
  std::size_t cycles_found = 0;
  const int scans = env.quick ? 3 : 5;
  const auto ops0 = daemon.mirror().stats().ops_issued;
  const auto m0 = Traffic::from(env.mntr());
  for (int i = 0; i < scans; ++i) {
    const auto a = Clock::now();
    cycles_found = daemon.scan_once().size();
    scan_ms.push_back(seconds(Clock::now() - a) * 1e3);
  }
  const auto traffic = Traffic::from(env.mntr()) - m0;
  const auto mirror_ops = daemon.mirror().stats().ops_issued - ops0;
  const double rss_peak = rss_mb();
  if (cycles_found != static_cast<std::size_t>(s.detector_cycles)) {
    throw std::runtime_error("detector found " + std::to_string(cycles_found) + " cycles, planted " +
                             std::to_string(s.detector_cycles));
  }

  // Detection latency: one more cycle, planted while the daemon runs.
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Clock::time_point> detected;
  daemon.on_cycle = [&](const detector::CycleReport& r) {
    if (!r.first_seen || r.text.find("late-") == std::string::npos) return;
    std::lock_guard lk(mu);
    if (!detected) detected = Clock::now();
    cv.notify_all();
  };
  std::thread runner([&] { daemon.run(); });
  std::this_thread::sleep_for(milliseconds(200));
  plant_cycle(planter, root + "/late", "late-0");
  const auto closed = Clock::now();
  double latency_ms = kNone;
  {
    std::unique_lock lk(mu);
    if (cv.wait_for(lk, milliseconds(30'000), [&] { return detected.has_value(); })) {
      latency_ms = seconds(*detected - closed) * 1e3;
    }
  }
  daemon.stop();
  runner.join();

  const std::string sc = "detector (" + std::to_string(s.detector_dirs * s.detector_locks_per_dir) + " held, " +
                         std::to_string(s.detector_waiters) + " waiting, " + std::to_string(s.detector_cycles) +
                         " cycles)";
  const auto per_k = [](double cpu, double reads) { return reads > 0 ? cpu * 1e6 / reads : kNone; };  // ms per 1,000
  const std::string fn = std::to_string(s.detector_floor_sessions) + " sessions";
  return {
      {sc, "mirror load time (floor: bare listing, 1 session)", "s", load_s, floor1.seconds, {}},
      {sc, "mirror load time (floor: bare listing, " + fn + ")", "s", load_s, floor_n.seconds, {}},
      {sc, "mirror load reads (floor: listings)", "", double(load_ops), double(floor1.listings), {}},
      {sc, "server CPU per 1,000 load reads (floor: 1 session)", "ms", per_k(load_server_cpu, double(load_ops)),
       per_k(floor1.server_cpu, double(floor1.listings)), {}},
      {sc, "server CPU per 1,000 load reads (floor: " + fn + ")", "ms", per_k(load_server_cpu, double(load_ops)),
       per_k(floor_n.server_cpu, double(floor_n.listings)), {}},
      {sc, "mirror load: bench process CPU (detector + planter)", "s", load_cpu, kNone, {}},
      {sc, "mirror load: server CPU (floor: 1 session)", "s", load_server_cpu, floor1.server_cpu, {}},
      {sc, "mirror sessions after load", "", double(sessions), kNone, {}},
      {sc, "steady scan p50", "ms", median(scan_ms), kNone, Target::value_le(200)},
      {sc, "steady scan max", "ms", *std::max_element(scan_ms.begin(), scan_ms.end()), kNone, {}},
      {sc, "detection latency (min-wait 500 ms)", "ms", latency_ms, kNone, {}},
      {sc, "RSS growth from load (detector's share)", "MB", rss_loaded - rss0, kNone, Target::value_le(200)},
      {sc, "RSS growth per mirrored path", "B", (rss_loaded - rss0) * 1024 * 1024 / double(mirrored_paths), kNone,
       Target::value_le(1536)},
      {sc, "RSS after load (whole bench process)", "MB", rss_loaded, kNone, {}},
      {sc, "RSS after scans", "MB", rss_peak, kNone, {}},
      {sc, "mirror ZooKeeper ops per idle scan", "", double(mirror_ops) / scans, kNone, Target::value_le(0)},
      {sc, "server requests per idle scan", "", double(traffic.packets_received) / scans, kNone, {}},
  };
}

}  // namespace zklock::bench
