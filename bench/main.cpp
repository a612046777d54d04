// zklock-bench: zklock against the textbook ZooKeeper recipe (the floor),
// both measured in the same run on the same server. Prints a table and
// writes JSON. docs/performance.md explains every figure.
//
//   zklock-bench [--quick] [--runs N] [--connect HOST:PORT] [--only a,b]
//                [--json FILE] [--detector-dirs N] [--detector-locks-per-dir N]
//                [--drain 100,1000,5000] [--restart-dirs N]
//                [--detector-load-sessions N] [--detector-floor-sessions N]
//
// After each scenario's run its tree (env.root) is deleted: the next run
// starts on a clean server.
//
// Without --connect a standalone ZooKeeper is started for the run through
// the test harness (tests/support/zk_harness.hpp) and stopped at the end.
#include <sys/utsname.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <sstream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "platform.hpp"
#include "scenarios.hpp"
#include "zk_harness.hpp"
#include "zk_tree.hpp"

namespace zb = zklock::bench;
using nlohmann::json;

namespace {

const std::vector<std::string> kScenarios = {"uncontended", "ops",     "contended", "drain",
                                             "pipelined",   "handoff", "fence",     "detector",
                                             "detector-scan",
                                             "retained",    "services", "platform",
                                             "restart"};

zb::Figures run_scenario(const std::string& name, const zb::Env& env, const zb::Sizes& s) {
  if (name == "uncontended") return zb::uncontended(env, s);
  if (name == "ops") return zb::op_costs(env, s);
  if (name == "contended") return zb::contended(env, s);
  if (name == "drain") return zb::drain(env, s);
  if (name == "pipelined") return zb::pipelined(env, s);
  if (name == "handoff") return zb::handoff(env, s);
  if (name == "fence") return zb::fence_gate(env, s);
  if (name == "detector") return zb::detector_at_scale(env, s);
  if (name == "detector-scan") return zb::detector_scan(env, s);
  if (name == "retained") return zb::retained(env, s);
  if (name == "services") return zb::services(env, s);
  if (name == "platform") return zb::platform(env, s);
  if (name == "restart") return zb::restart(env, s);
  throw std::invalid_argument("unknown scenario " + name);
}

std::string first_line_with(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.starts_with(key)) return line.substr(line.find(':') + 1);
  }
  return {};
}

std::string trim(std::string s) {
  const auto b = s.find_first_not_of(" \t");
  const auto e = s.find_last_not_of(" \t\n");
  return b == std::string::npos ? "" : s.substr(b, e - b + 1);
}

std::string loadavg() {
  std::ifstream in("/proc/loadavg");
  std::string a, b, c;
  in >> a >> b >> c;
  return a + " " + b + " " + c;
}

json machine() {
  utsname u{};
  uname(&u);
  return {{"cpu", trim(first_line_with("/proc/cpuinfo", "model name"))},
          {"cores", sysconf(_SC_NPROCESSORS_ONLN)},
          {"memory", trim(first_line_with("/proc/meminfo", "MemTotal"))},
          {"kernel", std::string(u.sysname) + " " + u.release},
          {"loadavg_at_start", loadavg()}};
}

std::string target_text(const zb::Target& t) {
  char buf[64];
  switch (t.kind) {
    case zb::Target::Kind::none: return "";
    case zb::Target::Kind::ratio_le: std::snprintf(buf, sizeof buf, "ratio <= %g", t.bound); break;
    case zb::Target::Kind::ratio_ge: std::snprintf(buf, sizeof buf, "ratio >= %g", t.bound); break;
    case zb::Target::Kind::value_le: std::snprintf(buf, sizeof buf, "<= %g", t.bound); break;
    case zb::Target::Kind::value_ge: std::snprintf(buf, sizeof buf, ">= %g", t.bound); break;
  }
  return buf;
}

std::optional<bool> target_met(const zb::Target& t, double value, double ratio) {
  switch (t.kind) {
    case zb::Target::Kind::none: return std::nullopt;
    case zb::Target::Kind::ratio_le: return std::isnan(ratio) ? std::nullopt : std::optional(ratio <= t.bound);
    case zb::Target::Kind::ratio_ge: return std::isnan(ratio) ? std::nullopt : std::optional(ratio >= t.bound);
    case zb::Target::Kind::value_le: return std::isnan(value) ? std::nullopt : std::optional(value <= t.bound);
    case zb::Target::Kind::value_ge: return std::isnan(value) ? std::nullopt : std::optional(value >= t.bound);
  }
  return std::nullopt;
}

std::string num(double v) {
  if (std::isnan(v)) return "-";
  char buf[32];
  const double a = std::fabs(v);
  if (a >= 100000) std::snprintf(buf, sizeof buf, "%.3g", v);
  else if (a >= 100) std::snprintf(buf, sizeof buf, "%.0f", v);
  else if (a >= 10) std::snprintf(buf, sizeof buf, "%.1f", v);
  else if (a >= 0.01 || a == 0) std::snprintf(buf, sizeof buf, "%.2f", v);
  else std::snprintf(buf, sizeof buf, "%.1e", v);  // small ratios (a re-take against a round trip)
  return buf;
}

// Deletes a run's tree once its scenario is done, so the next run starts on
// a clean server: left in place, its empty lock paths (containers) would be
// reaped by the server's container manager during the next run, whose
// writes-per-grant figures would then count those deletes too.
void delete_run_tree(const zb::Env& env) {
  try {
    auto h = zklock::test::ZkHandle::connect(env.connect, std::chrono::seconds(30));
    const auto d = zklock::test::delete_subtree(h.get(), env.root, std::chrono::seconds(120));
    env.log("cleanup: deleted " + std::to_string(d.deleted) + " nodes of " + env.root + " in " + num(d.seconds) +
            " s (" + std::to_string(d.gone) + " already gone" +
            (d.complete() ? ")" : ", " + std::to_string(d.failed) + " NOT deleted)"));
  } catch (const std::exception& e) {
    env.log(std::string("cleanup: ") + e.what());
  }
}

json jnum(double v) { return std::isnan(v) ? json(nullptr) : json(v); }

// Medians over runs, per figure, in first-seen order.
struct Aggregate {
  zb::Figure first;
  std::vector<double> zk, fl, ratio;
};

}  // namespace

int main(int argc, char** argv) {
  // The platform scenario's worker processes are this binary too.
  if (argc > 1 && std::string_view(argv[1]) == "platform-worker") return zb::platform_worker_main(argc - 1, argv + 1);
  CLI::App app{"zklock-bench: zklock against the textbook ZooKeeper recipe, same server, same run"};
  bool quick = false, verbose = false;
  int runs = 0;
  std::string connect, json_file, only;
  std::vector<int> drain_sizes;
  int det_dirs = 0, det_locks = 0, det_waiters = -1, det_inflight = 0, det_load_sessions = 0, det_floor_sessions = 0;
  app.add_flag("--quick", quick, "small counts, one run (CI: keeps the tool from rotting)");
  app.add_option("--runs", runs, "runs per scenario; medians are reported (default 3, --quick 1)");
  app.add_option("--connect", connect, "use this server (host:port, mntr allowed) instead of starting one");
  int server_pid = 0;
  app.add_option("--server-pid", server_pid, "with --connect: the server's process, for its CPU time (platform)");
  app.add_option("--only", only, "comma-separated scenarios: uncontended,ops,contended,drain,pipelined,handoff,fence,detector,detector-scan,retained,services,platform,restart");
  app.add_option("--json", json_file, "write the results as JSON to this file");
  app.add_option("--drain", drain_sizes, "drain queue sizes (default 100 1000 5000)")->delimiter(',');
  app.add_option("--detector-dirs", det_dirs, "detector: directories (default 100)");
  app.add_option("--detector-locks-per-dir", det_locks, "detector: held locks per directory (default 500)");
  app.add_option("--detector-waiters", det_waiters, "detector: waiting nodes (default 1000)");
  app.add_option("--detector-inflight", det_inflight, "detector: the mirror's reads outstanding (default: the detector's, 256)");
  app.add_option("--detector-load-sessions", det_load_sessions, "detector and platform: the mirror's load sessions (default: the detector's)");
  app.add_option("--detector-floor-sessions", det_floor_sessions, "detector: the listing floor's parallel sessions (default 4)");
  int restart_dirs = 0;
  app.add_option("--restart-dirs", restart_dirs, "restart: lock dirs, one held node each (default 100000)");
  app.add_flag("-v,--verbose", verbose, "log zklock and detector info messages");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  spdlog::set_level(verbose ? spdlog::level::info : spdlog::level::warn);

  try {
    auto sizes = quick ? zb::Sizes::quick() : zb::Sizes{};
    if (!drain_sizes.empty()) sizes.drain_waiters = drain_sizes;
    if (det_dirs > 0) sizes.detector_dirs = det_dirs;
    if (det_locks > 0) sizes.detector_locks_per_dir = det_locks;
    if (det_waiters >= 0) sizes.detector_waiters = det_waiters;
    if (det_inflight > 0) sizes.detector_inflight = det_inflight;
    if (det_load_sessions > 0) sizes.detector_load_sessions = det_load_sessions;
    if (det_floor_sessions > 0) sizes.detector_floor_sessions = det_floor_sessions;
    if (restart_dirs > 0) sizes.restart_dirs = restart_dirs;
    if (runs <= 0) runs = quick ? 1 : 3;
    std::vector<std::string> selected;
    if (only.empty()) {
      selected = kScenarios;
    } else {
      std::stringstream ss(only);
      for (std::string item; std::getline(ss, item, ',');) {
        if (std::find(kScenarios.begin(), kScenarios.end(), item) == kScenarios.end()) {
          std::cerr << "zklock-bench: unknown scenario '" << item << "'\n";
          return 2;
        }
        selected.push_back(item);
      }
    }

    std::unique_ptr<zklock::test::ZkServer> server;
    std::string host = "127.0.0.1";
    int port = 0;
    if (connect.empty()) {
      zklock::test::ZkServerOptions so;
      so.java_heap_mb = 1024;
      so.jvm_defaults = true;  // as zkServer.sh runs it: full JIT, the default collector
      // The benchmark's sessions ask for 30 s: the floor's listing storm
      // while thousands of waiters queue must not time connections out.
      so.max_session_timeout = std::chrono::milliseconds(60'000);
      server = std::make_unique<zklock::test::ZkServer>(so);
      std::cerr << "zklock-bench: starting ZooKeeper...\n";
      server->start();
      connect = server->connect_string();
      port = server->port();
    } else {
      const auto colon = connect.rfind(':');
      if (colon == std::string::npos || connect.find(',') != std::string::npos) {
        std::cerr << "zklock-bench: --connect takes one host:port\n";
        return 2;
      }
      host = connect.substr(0, colon);
      port = std::stoi(connect.substr(colon + 1));
    }
    auto mntr = [host, port] {
      auto text = zklock::test::four_letter_word(host, port, "mntr");
      if (!text) throw std::runtime_error("mntr: no answer from " + host + ":" + std::to_string(port));
      return zklock::test::parse_mntr(*text);
    };
    json info = machine();
    info["zookeeper"] = mntr().text("zk_version").value_or("?");
    std::cerr << "zklock-bench: " << connect << ", " << runs << " run(s), " << (quick ? "quick" : "full") << "\n";

    std::vector<std::string> order;
    std::map<std::string, Aggregate> agg;
    for (int run = 0; run < runs; ++run) {
      for (const auto& name : selected) {
        zb::Env env;
        env.connect = connect;
        env.mntr = mntr;
        env.quick = quick;
        env.server_pid = server ? static_cast<int>(server->pid()) : server_pid;
        env.run = run;
        env.root = "/bench/r" + std::to_string(run) + "-" + std::to_string(::getpid()) + "-" + name;
        env.log = [](const std::string& m) { std::cerr << "  " << m << "\n"; };
        std::cerr << "zklock-bench: run " << run + 1 << "/" << runs << ": " << name << "\n";
        const auto started = zb::Clock::now();
        for (auto& f : run_scenario(name, env, sizes)) {
          const auto key = f.scenario + "\n" + f.name;
          auto [it, fresh] = agg.try_emplace(key);
          if (fresh) {
            order.push_back(key);
            it->second.first = f;
          }
          it->second.zk.push_back(f.zklock);
          it->second.fl.push_back(f.floor);
          it->second.ratio.push_back(f.zklock / f.floor);
        }
        std::cerr << "  " << name << ": " << num(zb::seconds(zb::Clock::now() - started)) << " s\n";
        delete_run_tree(env);
      }
    }
    info["loadavg_at_end"] = loadavg();

    json figures = json::array();
    json groups = json::object();  // keyed figures, e.g. "platform": {"lock_ops_per_s": ...}
    std::printf("\n%-44s %-38s %10s %10s %7s  %-12s %s\n", "scenario", "figure", "zklock", "floor", "ratio", "target",
                "met");
    std::string last;
    for (const auto& key : order) {
      const auto& a = agg.at(key);
      const double z = zb::median(a.zk), f = zb::median(a.fl), r = zb::median(a.ratio);
      const auto met = target_met(a.first.target, z, r);
      const std::string unit = a.first.unit.empty() ? "" : " (" + a.first.unit + ")";
      std::printf("%-44s %-38s %10s %10s %7s  %-12s %s\n",
                  a.first.scenario == last ? "" : a.first.scenario.c_str(), (a.first.name + unit).c_str(),
                  num(z).c_str(), num(f).c_str(), num(r).c_str(), target_text(a.first.target).c_str(),
                  met ? (*met ? "yes" : "NO") : "");
      last = a.first.scenario;
      if (const auto& k = a.first.key; !k.empty()) {
        const auto dot = k.find('.');
        groups[k.substr(0, dot)][k.substr(dot + 1)] = jnum(a.first.key_from_floor ? f : z);
      }
      json runs_z = json::array(), runs_f = json::array();
      for (double v : a.zk) runs_z.push_back(jnum(v));
      for (double v : a.fl) runs_f.push_back(jnum(v));
      figures.push_back({{"scenario", a.first.scenario},
                         {"figure", a.first.name},
                         {"unit", a.first.unit},
                         {"zklock", jnum(z)},
                         {"floor", jnum(f)},
                         {"ratio", jnum(r)},
                         {"target", target_text(a.first.target)},
                         {"met", met ? json(*met) : json(nullptr)},
                         {"runs", {{"zklock", runs_z}, {"floor", runs_f}}}});
    }
    json doc = {{"tool", "zklock-bench"}, {"quick", quick}, {"runs", runs}, {"machine", info},
                      {"figures", figures}};
    for (auto& [group, values] : groups.items()) doc[group] = values;
    if (!json_file.empty()) {
      std::ofstream out(json_file);
      out << doc.dump(2) << "\n";
      if (!out) throw std::runtime_error("cannot write " + json_file);
      std::cerr << "zklock-bench: wrote " << json_file << "\n";
    }
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "zklock-bench: " << e.what() << "\n";
    return 1;
  }
}
