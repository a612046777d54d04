// The platform's figures (platform_parts.hpp): what the workers, the server,
// the detector and the floor reported, as one table. Keyed figures are also
// written under the JSON's top-level "platform" object (scripts read them).
#include <algorithm>

#include "histogram.hpp"
#include "platform_parts.hpp"

namespace zklock::bench {

namespace {

double num(const nlohmann::json& j, const char* key) {
  return j.contains(key) && j[key].is_number() ? j[key].get<double>() : 0.0;
}

// The detector runs with its default min-wait (platform_parts.hpp).
constexpr double kMinWaitMs = 1000;

Figure keyed(std::string sc, std::string name, std::string unit, double v, Target t, std::string key) {
  Figure f{std::move(sc), std::move(name), std::move(unit), v, kNone, t};
  f.key = "platform." + std::move(key);
  return f;
}

}  // namespace

Figures platform_figures(const PlatformSizes& p, const PlatformRun& run) {
  // The owners: their re-takes, the held locks, the session events.
  LogHistogram acquire;
  double ops = 0, errors = 0, late = 0, cpu = 0, held = 0, held_valid = 0;
  double retained = 0, fresh = 0, lost = 0, lapses = 0;
  for (const auto& o : run.owners) {
    acquire.merge(o["hist"].get<std::vector<std::uint64_t>>());
    ops += num(o, "ops");
    errors += num(o, "errors");
    late += num(o, "late");
    cpu += num(o, "cpu_s");
    held += num(o, "held");
    held_valid += num(o, "held_valid");
    retained += num(o["counts"], "granted_retained");
    fresh += num(o["counts"], "granted_fresh");
    lost += num(o["counts"], "lost");
    lapses += num(o["counts"], "lapses");
  }
  lost += num(run.hot["counts"], "lost");
  lapses += num(run.hot["counts"], "lapses");
  LogHistogram handoff, handoff_alone;
  handoff.merge(run.hot["hist"].get<std::vector<std::uint64_t>>());
  handoff_alone.merge(run.alone["hist"].get<std::vector<std::uint64_t>>());

  const double w = run.window_s;
  const double dt = seconds(run.r1.at - run.r0.at);
  const double uncontended_ops = ops / w;
  const double hot_grants = num(run.hot, "grants_per_s");
  const double lock_ops = uncontended_ops + hot_grants;
  const double writes = double(run.r1.zxid - run.r0.zxid) / dt;
  // Less the coordinator's own srvr and mntr (one each per reading).
  const double requests = double(run.r1.requests - run.r0.requests - 2) / dt;
  const auto& d = run.detector_end;
  const double revocations = d.revocations;
  double latency_max = kNone;
  if (!run.cycles.latency_ms.empty()) {
    latency_max = *std::max_element(run.cycles.latency_ms.begin(), run.cycles.latency_ms.end());
  }

  const std::string sc = "platform (" + std::to_string(p.owners) + " owners x " + std::to_string(p.rate_hz) + "/s, " +
                         std::to_string(p.owners * p.held) + " held, " + std::to_string(p.hot_locks) + " hot x " +
                         std::to_string(p.hot_contenders) + ")";
  Figures out{
      keyed(sc, "lock ops/s (uncontended + hot grants)", "/s", lock_ops, Target::value_ge(100'000), "lock_ops_per_s"),
      keyed(sc, "uncontended ops/s", "/s", uncontended_ops, {}, "uncontended_ops_per_s"),
      keyed(sc, "uncontended acquire p50", "us", acquire.percentile(50), Target::value_le(20), "uncontended_p50_us"),
      keyed(sc, "uncontended acquire p99", "us", acquire.percentile(99), Target::value_le(1000), "uncontended_p99_us"),
      keyed(sc, "uncontended acquire p99.9", "us", acquire.percentile(99.9), {}, "uncontended_p999_us"),
      keyed(sc, "re-takes decided locally", "share", retained / std::max(1.0, retained + fresh), {}, "local_share"),
      keyed(sc, "owner ops started > 10 ms late", "", late, {}, "late_ops"),
      keyed(sc, "owner errors", "", errors, Target::value_le(0), "owner_errors"),
      keyed(sc, "hot grants/s (every one a hand-off)", "/s", hot_grants, {}, "hot_grants_per_s"),
      {sc, "hot hand-off p50 (floor column: alone)", "us", handoff.percentile(50), handoff_alone.percentile(50),
       Target::ratio_le(1.2)},
      keyed(sc, "hot hand-off p50", "us", handoff.percentile(50), {}, "hot_handoff_p50_us"),
      keyed(sc, "hot hand-off p99", "us", handoff.percentile(99), {}, "hot_handoff_p99_us"),
      keyed(sc, "ZooKeeper requests/s", "/s", requests, {}, "zk_requests_per_s"),
      keyed(sc, "ZooKeeper writes/s", "/s", writes, {}, "zk_writes_per_s"),
      keyed(sc, "ZooKeeper writes per hot grant", "", writes / std::max(hot_grants, 1e-9), Target::value_le(2.2),
            "zk_writes_per_hot_grant"),
      keyed(sc, "server CPU", "cores", (run.r1.server_cpu_s - run.r0.server_cpu_s) / dt, {}, "server_cpu_cores"),
      keyed(sc, "owner client CPU per op", "us", cpu / std::max(ops, 1.0) * 1e6, {}, "client_cpu_us_per_op"),
      keyed(sc, "validity-bound lapses", "", lapses, Target::value_le(0), "bound_lapses"),
      keyed(sc, "leases lost (incl. held locks no longer valid)", "", lost + (held - held_valid), Target::value_le(0),
            "leases_lost"),
      keyed(sc, "state build time (held + retained + hot queues)", "s", run.build_s, {}, "build_s"),
      keyed(sc, "detector mirror load", "s", run.load.seconds, Target::value_le(3), "detector_load_s"),
      keyed(sc, "detector load reads per lock path", "", run.load.reads / double(std::max<std::size_t>(run.lock_paths, 1)),
            Target::value_le(1), "detector_reads_per_lock_path"),
      keyed(sc, "detector scan p50", "ms", d.scan_p50_ms, Target::value_le(5), "detector_scan_p50_ms"),
      keyed(sc, "detector scan max", "ms", d.scan_max_ms, {}, "detector_scan_max_ms"),
      keyed(sc, "detector RSS", "MB", d.rss_mb, Target::value_le(200), "detector_rss_mb"),
      keyed(sc, "detector CPU", "cores", (run.r1.detector_cpu_s - run.r0.detector_cpu_s) / dt, {}, "detector_cpu_cores"),
      keyed(sc, "cycles planted", "", double(run.cycles.planted), {}, "cycles_planted"),
      keyed(sc, "revocations", "", revocations, Target::value_le(double(run.cycles.planted)), "revocations"),
      keyed(sc, "planted cycles broken (victim told)", "", double(run.cycles.victims),
            Target::value_ge(double(run.cycles.planted)), "cycles_broken"),
      keyed(sc, "detection latency max (min-wait 1 s)", "ms", latency_max, Target::value_le(kMinWaitMs + 1000),
            "detection_latency_max_ms"),
      keyed(sc, "cycle errors (unbroken, or a wrong outcome)", "", double(run.cycles.other_errors), Target::value_le(0),
            "cycle_errors"),
  };
  // Each planted cycle, from the moment it closed to the victim being told:
  // the detector's promise is min-wait plus one scan interval.
  for (std::size_t k = 0; k < run.cycles.latency_ms.size(); ++k) {
    const auto n = std::to_string(k + 1);
    out.push_back(keyed(sc, "detection latency, cycle " + n, "ms", run.cycles.latency_ms[k],
                        Target::value_le(kMinWaitMs + 1000), "detection_latency_cycle" + n + "_ms"));
  }
  // The floor: its highest sustained owner rate, and zklock's over it.
  Figure fmax{sc, "highest sustained owner ops/s (p99 <= 10 ms)", "/s", uncontended_ops, run.floor.max_ops_per_s,
              run.floor.max_ops_per_s > 0 ? Target::ratio_ge(40) : Target{}};  // no step sustained: no ratio to judge
  fmax.key = "platform.floor_max_ops_per_s";
  fmax.key_from_floor = true;
  out.push_back(fmax);
  Figure quiet{sc, "highest sustained owner ops/s, floor without hot locks", "/s", uncontended_ops,
               run.floor_quiet.max_ops_per_s, {}};
  quiet.key = "platform.floor_quiet_max_ops_per_s";
  quiet.key_from_floor = true;
  out.push_back(quiet);
  auto steps = [&](const FloorResult& f, const std::string& where) {
    for (const auto& st : f.steps) {
      const auto at = "floor" + where + " at " + std::to_string(static_cast<int>(st.rate)) + "/s: ";
      out.push_back({sc, at + "achieved", "/s", kNone, st.achieved, {}});
      out.push_back({sc, at + "acquire p99", "us", kNone, st.p99_us, {}});
    }
  };
  steps(run.floor, "");
  steps(run.floor_quiet, " (no hot locks)");
  return out;
}

}  // namespace zklock::bench
