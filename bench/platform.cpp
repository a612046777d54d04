// The `platform` scenario: the seed's whole platform on one machine. Owner
// processes (platform_worker.cpp) re-take their own retained locks at a
// steady rate while holding long-lived locks; a hot process cycles a few
// locks with many contenders (platform_hot.cpp); the real zklock-detector
// daemon watches the tree, and three two-owner cycles are planted in the
// window. Then the floor's recipe is stepped up beside the same hot locks
// and held state until its uncontended p99 passes 10 ms (platform_floor.cpp).
// docs/performance.md, "The seed's platform", explains every figure.
#include <unistd.h>

#include <csignal>
#include <filesystem>
#include <future>
#include <fstream>
#include <thread>

#include "child_process.hpp"
#include "histogram.hpp"
#include "platform.hpp"
#include "platform_parts.hpp"
#include "scenarios.hpp"
#include "zk_net.hpp"
#include "zklock/fair_mutex.hpp"

namespace zklock::bench {

using namespace std::chrono_literals;
using nlohmann::json;

namespace {

std::string self_exe() { return std::filesystem::read_symlink("/proc/self/exe").string(); }

std::int64_t ns(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(t.time_since_epoch()).count();
}

// A worker process and its line protocol (platform_worker.cpp).
class Worker {
 public:
  explicit Worker(std::vector<std::string> args) {
    test::SpawnOptions so;
    so.argv = {self_exe(), "platform-worker"};
    so.argv.insert(so.argv.end(), args.begin(), args.end());
    so.pipe_stdin = true;
    child_ = test::ChildProcess::spawn(so);
  }
  // The next answer line starting with one of `words`; throws on "error" or silence.
  std::string expect(const std::string& word, std::chrono::milliseconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (Clock::now() < deadline) {
      auto line = child_.read_line(std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()));
      if (!line) break;
      if (line->starts_with("error")) throw std::runtime_error("platform worker: " + *line);
      if (line->starts_with(word)) return line->substr(std::min(line->size(), word.size() + 1));
    }
    throw std::runtime_error("platform worker: no '" + word + "' within " + std::to_string(timeout.count()) + " ms");
  }
  void send(const std::string& line) {
    if (!child_.write_line(line)) throw std::runtime_error("platform worker: stdin closed");
  }
  void window(Clock::time_point s, Clock::time_point m, Clock::time_point e) {
    send("window " + std::to_string(ns(s)) + " " + std::to_string(ns(m)) + " " + std::to_string(ns(e)));
  }
  json result(Clock::time_point end) {
    return json::parse(expect("result", std::chrono::duration_cast<std::chrono::milliseconds>(end - Clock::now()) + 180s));
  }
  void quit() {
    send("quit");
    expect("bye", 120s);
    child_.wait_exit(30s);
  }
  pid_t pid() const { return child_.pid(); }

 private:
  test::ChildProcess child_;
};

}  // namespace

Figures platform(const Env& env, const Sizes& s) {
  std::signal(SIGPIPE, SIG_IGN);  // a dead worker's stdin must fail a write, not kill us
  const auto& p = s.platform;
  const auto root = env.root + "/platform";
  const int per_proc = p.owners / p.processes;
  auto hot_args = [&] {
    return std::vector<std::string>{"--role", "hot", "--connect", env.connect, "--root", root,
                                    "--sessions", std::to_string(p.hot_sessions), "--locks", std::to_string(p.hot_locks),
                                    "--contenders", std::to_string(p.hot_contenders), "--work-ms", std::to_string(p.work_ms)};
  };

  // 1. The hot locks alone: the reference for their hand-off in the platform.
  Worker hot(hot_args());
  hot.expect("ready", 120s);
  auto run_window = [&](std::vector<Worker*> ws, double warm, double secs) {
    const auto s0 = Clock::now() + 300ms;
    const auto m = s0 + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(warm));
    const auto e = m + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(secs));
    for (auto* w : ws) w->window(s0, m, e);
    return std::tuple{s0, m, e};
  };
  env.log("platform: hot locks alone");
  auto [a0, am, ae] = run_window({&hot}, p.warmup_s, p.alone_s);
  const json alone = hot.result(ae);

  // 2. The owners' state: held locks and retained locks, built in parallel.
  env.log("platform: " + std::to_string(p.owners) + " owners over " + std::to_string(p.processes) + " processes, " +
          std::to_string(p.owners * p.held) + " held locks");
  const auto build0 = Clock::now();
  std::vector<std::unique_ptr<Worker>> owners;
  for (int k = 0; k < p.processes; ++k) {
    owners.push_back(std::make_unique<Worker>(std::vector<std::string>{
        "--role", "owners", "--connect", env.connect, "--root", root, "--index", std::to_string(k), "--owners",
        std::to_string(per_proc), "--held", std::to_string(p.held), "--rate", std::to_string(p.rate_hz),
        "--threads", std::to_string(p.threads), "--retain-ms", std::to_string(p.retain_ms)}));
  }
  for (auto& w : owners) w->expect("ready", 900s);
  hot.send("queue");
  hot.expect("queued", 120s);
  const double build_s = seconds(Clock::now() - build0);
  settle(env, 300ms, 60s);
  const std::size_t nodes = static_cast<std::size_t>(per_proc) * p.processes * (1 + p.held) +
                            static_cast<std::size_t>(p.hot_locks) * p.hot_contenders;
  const std::size_t lock_paths = static_cast<std::size_t>(per_proc) * p.processes * (1 + p.held) + p.hot_locks;

  // 3. The detector, started on the full tree: its mirror load.
  DetectorRun detector(env, root, s.detector_load_sessions);
  const auto load = detector.wait_loaded(nodes, 600s);
  env.log("platform: detector loaded " + std::to_string(nodes) + " nodes in " + std::to_string(load.seconds) + " s");

  // 4. The window: everything at once, three cycles planted in it.
  std::vector<Worker*> all{&hot};
  for (auto& w : owners) all.push_back(w.get());
  auto [w0, wm, we] = run_window(all, p.warmup_s, p.window_s);
  std::this_thread::sleep_until(wm);
  const auto r0 = ServerReading::take(env, detector);
  auto planting = std::async(std::launch::async, [&] { return plant_cycles(env, root, wm, we, p.cycles); });
  std::this_thread::sleep_until(we);
  const auto r1 = ServerReading::take(env, detector);
  const auto cycles = planting.get();
  std::vector<json> owner_results;
  for (auto& w : owners) owner_results.push_back(w->result(we));
  const json hot_r = hot.result(we);
  const auto det_end = detector.reading();

  // 5. The floor, stepped up beside the same hot locks and held state.
  env.log("platform: the floor's recipe, stepped up");
  const auto floor = floor_step_up(
      env, root, p, [&](double warm, double secs) { return run_window({&hot}, warm, secs); },
      [&](Clock::time_point end) { return hot.result(end); });
  // And beside the held state alone: under the hot locks' commits every
  // create waits behind their fsyncs, so the mix may sustain no step at all.
  env.log("platform: the floor's recipe, stepped up without the hot locks");
  const auto floor_quiet = floor_step_up(
      env, root, p, [&](double warm, double secs) { return run_window({}, warm, secs); },
      [](Clock::time_point) { return json{}; });

  for (auto& w : owners) w->quit();
  hot.quit();
  detector.stop();

  return platform_figures(p, {.build_s = build_s,
                              .nodes = nodes,
                              .lock_paths = lock_paths,
                              .load = load,
                              .alone = alone,
                              .hot = hot_r,
                              .owners = owner_results,
                              .r0 = r0,
                              .r1 = r1,
                              .window_s = seconds(we - wm),
                              .detector_end = det_end,
                              .cycles = cycles,
                              .floor = floor,
                              .floor_quiet = floor_quiet});
}

}  // namespace zklock::bench
