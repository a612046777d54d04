// Metrics: the detector's numbers, in Prometheus text format, and the small
// HTTP server (cpp-httplib) that serves them with a health check.
//
//   GET /metrics   text/plain; version=0.0.4 (every metric is listed in docs/detector.md)
//   GET /healthz   200 "ok" while healthy (Daemon::health: a recent successful
//                  ZooKeeper request, and connected), else 503 with the reason
//   GET /          the status page (HTML; detector/status.hpp)
//   GET /api/state the status page's data (JSON; docs/detector.md)
//
// Thread-safety: Metrics may be updated and rendered from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <utility>

#include "detector/mirror.hpp"
#include "detector/status.hpp"

namespace zklock::detector {

// A cumulative histogram with fixed upper bounds (seconds).
struct Histogram {
  std::vector<double> bounds;
  std::vector<std::uint64_t> counts;  // per bound, cumulative when rendered
  double sum = 0;
  std::uint64_t count = 0;
  void observe(double v);
};

class Metrics {
 public:
  Metrics();

  struct ScanFigures {
    std::size_t locks = 0, holders = 0, waiters = 0;
    double oldest_wait_seconds = 0;
    std::size_t cycles = 0;              // cycles seen by this scan
    std::uint64_t oldest_cycle_scans = 0;  // consecutive scans the longest-lived of them was seen in
    // The longest any head has kept waiters behind it (Daemon::heads_); 0: none.
    double oldest_head_with_waiters_seconds = 0;
    double scan_seconds = 0;
  };
  void record_scan(const ScanFigures& f, const MirrorStats& mirror);
  void set_leader(bool leader);
  void set_connected(bool connected);
  // The configured scan interval (exported, so alerts can compare scan time to it).
  void set_scan_interval(double seconds);
  // The configured victim policy: its revocation counters are exported at 0
  // from the start, so the first revocation shows in increase()/rate().
  void set_policy(const std::string& policy);
  // A session state change ("connected", "suspended", "reconnected", "lost":
  // zklock::state_name), counted so alerts can tell a flapping session.
  void session_state(std::string_view state);
  void cycle_detected(double detection_latency_seconds);
  // outcome: "revoked", "aborted", "deposed", "failed" or "dry_run".
  void revocation(const std::string& policy, const std::string& outcome);

  std::uint64_t cycles_detected() const;
  std::uint64_t revocations(const std::string& outcome) const;  // summed over policies
  std::uint64_t aborted() const { return revocations("aborted"); }
  std::uint64_t scans() const;

  std::string render() const;

 private:
  mutable std::mutex mu_;
  ScanFigures last_;                   // GUARDED_BY(mu_)
  MirrorStats mirror_;                 // GUARDED_BY(mu_)
  bool leader_ = false, connected_ = false;
  double scan_interval_seconds_ = 0;
  std::map<std::string, std::uint64_t, std::less<>> session_states_;  // state -> changes
  std::uint64_t scans_ = 0, cycles_ = 0;
  std::map<std::pair<std::string, std::string>, std::uint64_t> revocations_;  // (policy, outcome)
  Histogram scan_seconds_, latency_seconds_;
  // The last kRecentScans scan times, a ring: recent_[i % kRecentScans] is
  // scan i's (0-based) for the newest min(scans_, kRecentScans) of them.
  static constexpr std::size_t kRecentScans = 128;
  std::array<double, kRecentScans> recent_{};
};

// Serves /metrics, /healthz and, with a board, / and /api/state on
// <host>:<port> from its own threads. Every route is a GET that changes nothing.
class MetricsServer {
 public:
  // `healthy` returns an empty string when healthy, else the reason.
  // port 0 picks a free port (see port()). Throws Error(io_error) if it cannot bind.
  // REQUIRES: `metrics` and `status` (when not null) outlive the server.
  MetricsServer(const Metrics& metrics, std::string host, int port, std::function<std::string()> healthy,
                StatusBoard* status = nullptr);
  ~MetricsServer();
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  int port() const noexcept { return port_; }

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace zklock::detector
