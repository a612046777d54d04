// The `platform` coordinator's parts (platform.cpp runs them in order): the
// detector process and its metrics, server readings, the planted cycles, the
// floor's step-up, and the figures.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "measure.hpp"
#include "scenarios.hpp"

namespace zklock::test {
class ChildProcess;
}

namespace zklock::bench {

// CPU seconds (user + system) and resident MB of another process, from /proc.
double proc_cpu_seconds(pid_t pid);
double proc_rss_mb(pid_t pid);

// zklock-detector in its own process (--interval 1s, the default min-wait),
// its metrics scraped from --metrics-port on loopback.
class DetectorRun {
 public:
  // load_sessions: the daemon's --load-sessions; 0 leaves its default.
  DetectorRun(const Env& env, const std::string& root, int load_sessions = 0);
  ~DetectorRun();
  struct Load {
    double seconds = kNone;  // from spawn until the mirror holds every node, no read pending
    double reads = kNone;    // mirror reads issued by then
    double rss_mb = kNone;
  };
  Load wait_loaded(std::size_t nodes, std::chrono::milliseconds limit);
  struct Reading {
    double cpu_s = kNone, rss_mb = kNone, reads = kNone, scans = kNone;
    double revocations = kNone, cycles_detected = kNone;
    double scan_p50_ms = kNone, scan_max_ms = kNone;  // over its last scans
    double latency_sum_s = kNone, latency_count = kNone;
  };
  Reading reading();
  void stop();

 private:
  std::map<std::string, double> scrape();  // "name{labels}" -> value
  std::unique_ptr<test::ChildProcess> child_;
  int port_ = 0;
  std::string log_;
};

// The server's counters at one instant (and the detector's CPU).
struct ServerReading {
  Clock::time_point at;
  std::int64_t zxid = 0, requests = 0;
  double server_cpu_s = kNone, detector_cpu_s = kNone;
  static ServerReading take(const Env& env, DetectorRun& detector);
};

struct CycleResult {
  int planted = 0, victims = 0, other_errors = 0;
  std::vector<double> latency_ms;  // cycle closed -> victim told
};
// Plants `n` two-owner cycles, evenly spread over [from, to), each waiting
// (bounded) for the detector to break it, then releases its locks.
CycleResult plant_cycles(const Env& env, const std::string& root, Clock::time_point from, Clock::time_point to,
                         int n);

struct FloorStep {
  double rate = 0, achieved = 0, p50_us = kNone, p99_us = kNone, missed = 0, errors = 0;
  bool sustained = false;
};
struct FloorResult {
  double max_ops_per_s = 0;  // the highest rate sustained with p99 <= 10 ms
  std::vector<FloorStep> steps;
};
// The floor's owners at rising rates, each step in a window:
// `hot_window(warm, secs)` starts one (beside the hot locks, or not) and
// returns (start, measure, end); `hot_result(end)` collects it.
using HotWindow = std::function<std::tuple<Clock::time_point, Clock::time_point, Clock::time_point>(double, double)>;
FloorResult floor_step_up(const Env& env, const std::string& root, const PlatformSizes& p, const HotWindow& hot_window,
                          const std::function<nlohmann::json(Clock::time_point)>& hot_result);

struct PlatformRun {
  double build_s = 0;
  std::size_t nodes = 0, lock_paths = 0;
  DetectorRun::Load load;
  nlohmann::json alone, hot;
  std::vector<nlohmann::json> owners;
  ServerReading r0, r1;
  double window_s = 0;
  DetectorRun::Reading detector_end;
  CycleResult cycles;
  FloorResult floor;        // beside the hot locks and the held state: the same mix
  FloorResult floor_quiet;  // beside the held state only
};
Figures platform_figures(const PlatformSizes& p, const PlatformRun& run);

}  // namespace zklock::bench
