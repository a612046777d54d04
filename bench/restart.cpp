// Restart at scale: the detector's mirror over `restart_dirs`
// lock dirs, one held node each, in this process; the ZooKeeper server is
// restarted on the same port and data dir well inside the detector's session
// timeout, and a two-owner cycle is planted the moment it is back. Reported:
// how long from the restart until a scan finds that cycle (the next scan
// that sees the tree as it is), the mirror's sessions and the watched bytes
// of each (what each re-sends in its SetWatches on reconnect).
//
// The scenario runs its own server (it has to restart it): env.connect is
// not used.
#include <condition_variable>
#include <mutex>
#include <stdexcept>
#include <thread>

#include <spdlog/spdlog.h>

#include "detector/daemon.hpp"
#include "scenarios.hpp"
#include "zk_server.hpp"
#include "zklock/protocol/node_data.hpp"
#include "zklock/protocol/node_name.hpp"

namespace zklock::bench {
namespace {

using std::chrono::milliseconds;

std::string lock_data(const std::string& owner) {
  protocol::NodeData d;
  d.owner = owner;
  d.host = "bench";
  d.pid = 1;
  return protocol::encode_node_data(d);
}

std::string lock_prefix(const std::string& owner) {
  return protocol::lock_node_prefix(Mode::exclusive, protocol::owner_key(owner), protocol::new_guid());
}

// `n` lock dirs under `root`, one held node each (ephemeral of `c`): one
// multi per 100 dirs, at most 16 in flight.
void plant_lone_locks(Client& c, const std::string& root, int n) {
  std::mutex mu;
  std::condition_variable cv;
  int inflight = 0;
  std::string error;
  const auto data = lock_data("holder"), prefix = lock_prefix("holder");
  auto wait = [&](auto pred) {
    std::unique_lock lk(mu);
    if (!cv.wait_for(lk, milliseconds(120'000), pred)) throw std::runtime_error("restart: planting timed out");
    if (!error.empty()) throw std::runtime_error(error);
  };
  for (int first = 0; first < n; first += 100) {
    std::vector<Op> ops;
    for (int i = first; i < std::min(n, first + 100); ++i) {
      const auto dir = root + "/l" + std::to_string(i);
      ops.push_back(Op::create(dir, ""));
      ops.push_back(Op::create(dir + "/" + prefix, data, CreateMode::ephemeral_sequential));
    }
    wait([&] { return inflight < 16; });
    {
      std::lock_guard lk(mu);
      ++inflight;
    }
    c.multi_async(std::move(ops), [&](Status s, std::vector<OpResult>) {
      std::lock_guard lk(mu);
      if (!s.ok() && error.empty()) error = "restart: planting failed: " + std::string(errc_name(s.code()));
      --inflight;
      cv.notify_all();
    });
  }
  wait([&] { return inflight == 0; });
}

// Two owners, each holding one lock and waiting for the other's.
void plant_cycle(Client& c, const std::string& root, const std::string& tag) {
  const auto x = root + "/" + tag + "-x", y = root + "/" + tag + "-y";
  c.ensure_path(x, CreateMode::persistent);
  c.ensure_path(y, CreateMode::persistent);
  const auto a = tag + "-a", b = tag + "-b";
  for (const auto& [lock, owner] : {std::pair{x, a}, {y, b}, {y, a}, {x, b}}) {
    c.create(lock + "/" + lock_prefix(owner), lock_data(owner), CreateMode::ephemeral_sequential);
  }
}

}  // namespace

Figures restart(const Env& env, const Sizes& s) {
  test::ZkServerOptions so;
  so.java_heap_mb = 1024;
  so.jvm_defaults = true;
  so.max_session_timeout = milliseconds(60'000);
  test::ZkServer server(so);
  server.start();
  ClientOptions co;
  co.connect = server.connect_string();
  co.session_timeout = milliseconds(40'000);  // the planted nodes outlive the restart
  Client planter(co);
  const std::string root = "/bench-restart";
  planter.ensure_path(root, CreateMode::persistent);
  env.log("restart: planting " + std::to_string(s.restart_dirs) + " lock dirs");
  plant_lone_locks(planter, root, s.restart_dirs);

  detector::DetectorConfig cfg;
  cfg.zk = server.connect_string();
  cfg.root = root;
  cfg.interval = milliseconds(1000);
  cfg.min_wait = milliseconds(500);
  cfg.session_timeout = milliseconds(30'000);
  cfg.resync_interval = std::chrono::hours(1);  // watches, not the safety net, must carry the mirror
  cfg.dry_run = true;
  cfg.max_children = static_cast<std::size_t>(s.restart_dirs) + 100;  // the root holds every lock dir
  cfg.id = "zklock-bench-restart";
  cfg.log = spdlog::default_logger();
  detector::Daemon daemon(cfg);
  const auto t0 = Clock::now();
  const auto expected = static_cast<std::size_t>(s.restart_dirs);
  while (!(daemon.mirror().stats().nodes >= expected && daemon.mirror().idle())) {
    if (Clock::now() - t0 > milliseconds(600'000)) throw std::runtime_error("restart: the mirror did not load");
    std::this_thread::sleep_for(milliseconds(5));
  }
  const double load_s = seconds(Clock::now() - t0);
  const auto loaded = daemon.mirror().stats();
  double total_bytes = 0;
  for (auto b : loaded.session_watch_bytes) total_bytes += static_cast<double>(b);
  env.log("restart: mirror loaded in " + std::to_string(load_s) + " s on " +
          std::to_string(loaded.session_watch_bytes.size()) + " sessions");

  std::mutex mu;
  std::condition_variable cv;
  std::optional<Clock::time_point> detected;
  daemon.on_cycle = [&](const detector::CycleReport& r) {
    if (!r.first_seen || r.text.find("after-") == std::string::npos) return;
    std::lock_guard lk(mu);
    if (!detected) detected = Clock::now();
    cv.notify_all();
  };
  std::thread runner([&] { daemon.run(); });
  const auto down = Clock::now();
  server.stop();
  server.start();
  const auto up = Clock::now();
  plant_cycle(planter, root, "after-restart");
  const auto closed = Clock::now();
  double detected_s = kNone, closed_to_detected_s = kNone;
  {
    std::unique_lock lk(mu);
    if (cv.wait_for(lk, milliseconds(120'000), [&] { return detected.has_value(); })) {
      detected_s = seconds(*detected - down);
      closed_to_detected_s = seconds(*detected - closed);
    }
  }
  daemon.stop();
  runner.join();
  const auto after = daemon.mirror().stats();

  const std::string sc = "restart (" + std::to_string(s.restart_dirs) + " lock dirs)";
  return {
      {sc, "mirror load time", "s", load_s, kNone, {}},
      {sc, "mirror sessions", "", double(loaded.session_watch_bytes.size()), kNone, {}},
      {sc, "watched bytes, fullest session", "B", double(loaded.max_session_watch_bytes()), kNone,
       Target::value_le(double(ClientOptions{}.watch_budget_bytes))},
      {sc, "watched bytes, all sessions", "B", total_bytes, kNone, {}},
      {sc, "server down and back", "s", seconds(up - down), kNone, {}},
      {sc, "restart -> next scan with the new cycle", "s", detected_s, kNone, {}},
      {sc, "cycle planted -> detected", "s", closed_to_detected_s, kNone, {}},
      {sc, "re-lists after the restart", "", double(after.resyncs - loaded.resyncs), kNone, Target::value_le(0)},
  };
}

}  // namespace zklock::bench
