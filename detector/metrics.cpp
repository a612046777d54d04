#include "detector/metrics.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include <httplib.h>

#include "zklock/error.hpp"

namespace zklock::detector {
namespace {

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

void header(std::string& out, const char* name, const char* type, const char* help) {
  out += "# HELP ";
  out += name;
  out += ' ';
  out += help;
  out += "\n# TYPE ";
  out += name;
  out += ' ';
  out += type;
  out += '\n';
}

void sample(std::string& out, const char* name, double v, const char* help, const char* type = "gauge") {
  header(out, name, type, help);
  out += name;
  out += ' ';
  out += num(v);
  out += '\n';
}

void histogram(std::string& out, const char* name, const Histogram& h, const char* help) {
  header(out, name, "histogram", help);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += h.counts[i];
    out += std::string(name) + "_bucket{le=\"" + num(h.bounds[i]) + "\"} " + std::to_string(cumulative) + "\n";
  }
  out += std::string(name) + "_bucket{le=\"+Inf\"} " + std::to_string(h.count) + "\n";
  out += std::string(name) + "_sum " + num(h.sum) + "\n";
  out += std::string(name) + "_count " + std::to_string(h.count) + "\n";
}

std::string label_value(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

// A summary over a window: the nearest-rank quantiles 0.5, 0.99 and 1 (the
// maximum) of `window`, with _sum and _count over every observation (the
// Prometheus convention: rate(_sum)/rate(_count) stays a true mean). No
// quantile line while the window is empty.
void summary(std::string& out, const char* name, std::vector<double> window, double sum, std::uint64_t count,
             const char* help) {
  header(out, name, "summary", help);
  std::sort(window.begin(), window.end());
  for (const auto& [label, q] : {std::pair{"0.5", 0.5}, std::pair{"0.99", 0.99}, std::pair{"1", 1.0}}) {
    if (window.empty()) break;
    const auto rank = static_cast<std::size_t>(std::ceil(q * static_cast<double>(window.size())));
    out += std::string(name) + "{quantile=\"" + label + "\"} " + num(window[std::max<std::size_t>(rank, 1) - 1]) +
           "\n";
  }
  out += std::string(name) + "_sum " + num(sum) + "\n";
  out += std::string(name) + "_count " + std::to_string(count) + "\n";
}

}  // namespace

void Histogram::observe(double v) {
  for (std::size_t i = 0; i < bounds.size(); ++i) {
    if (v <= bounds[i]) {
      ++counts[i];
      break;
    }
  }
  sum += v;
  ++count;
}

Metrics::Metrics() {
  scan_seconds_.bounds = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5};
  scan_seconds_.counts.assign(scan_seconds_.bounds.size(), 0);
  latency_seconds_.bounds = {0.5, 1, 1.5, 2, 3, 5, 10, 30, 60};
  latency_seconds_.counts.assign(latency_seconds_.bounds.size(), 0);
  for (const char* state : {"connected", "suspended", "reconnected", "lost"}) session_states_[state] = 0;
}

void Metrics::record_scan(const ScanFigures& f, const MirrorStats& mirror) {
  std::lock_guard lock(mu_);
  last_ = f;
  mirror_ = mirror;
  recent_[scans_ % kRecentScans] = f.scan_seconds;
  ++scans_;
  scan_seconds_.observe(f.scan_seconds);
}

void Metrics::set_leader(bool leader) {
  std::lock_guard lock(mu_);
  leader_ = leader;
}

void Metrics::set_connected(bool connected) {
  std::lock_guard lock(mu_);
  connected_ = connected;
}

void Metrics::set_scan_interval(double seconds) {
  std::lock_guard lock(mu_);
  scan_interval_seconds_ = seconds;
}

void Metrics::set_policy(const std::string& policy) {
  std::lock_guard lock(mu_);
  for (const char* outcome : {"revoked", "aborted", "deposed", "failed", "dry_run"}) revocations_[{policy, outcome}];
}

void Metrics::session_state(std::string_view state) {
  std::lock_guard lock(mu_);
  auto it = session_states_.find(state);
  if (it == session_states_.end()) it = session_states_.emplace(std::string(state), 0).first;
  ++it->second;
}

void Metrics::cycle_detected(double latency) {
  std::lock_guard lock(mu_);
  ++cycles_;
  latency_seconds_.observe(latency);
}

void Metrics::revocation(const std::string& policy, const std::string& outcome) {
  std::lock_guard lock(mu_);
  ++revocations_[{policy, outcome}];
}

std::uint64_t Metrics::cycles_detected() const {
  std::lock_guard lock(mu_);
  return cycles_;
}

std::uint64_t Metrics::scans() const {
  std::lock_guard lock(mu_);
  return scans_;
}

std::uint64_t Metrics::revocations(const std::string& outcome) const {
  std::lock_guard lock(mu_);
  std::uint64_t n = 0;
  for (const auto& [key, v] : revocations_) {
    if (key.second == outcome) n += v;
  }
  return n;
}

std::string Metrics::render() const {
  std::lock_guard lock(mu_);
  std::string out;
  sample(out, "zklock_detector_leader", leader_ ? 1 : 0, "1 while this replica is the acting detector.");
  sample(out, "zklock_detector_zookeeper_connected", connected_ ? 1 : 0, "1 while the ZooKeeper session is connected.");
  header(out, "zklock_detector_zookeeper_session_state_changes_total", "counter",
         "ZooKeeper session state changes by new state (connected, suspended, reconnected, lost).");
  for (const auto& [state, n] : session_states_) {
    out += "zklock_detector_zookeeper_session_state_changes_total{state=\"" + label_value(state) + "\"} " +
           std::to_string(n) + "\n";
  }
  sample(out, "zklock_detector_scan_interval_seconds", scan_interval_seconds_,
         "The configured scan interval (--interval).");
  sample(out, "zklock_detector_locks", static_cast<double>(last_.locks), "Lock paths with at least one node, at the last scan.");
  sample(out, "zklock_detector_holders", static_cast<double>(last_.holders), "Lock nodes that hold their lock, at the last scan.");
  sample(out, "zklock_detector_waiters", static_cast<double>(last_.waiters), "Lock nodes that wait, at the last scan.");
  sample(out, "zklock_detector_oldest_wait_seconds", last_.oldest_wait_seconds,
         "Age of the oldest waiting lock node, at the last scan.");
  sample(out, "zklock_detector_oldest_head_with_waiters_seconds", last_.oldest_head_with_waiters_seconds,
         "Longest time the head node of a lock has had waiters behind it, at the last scan (0: no waiter). "
         "A long hold and a head that does not take the lock look the same: check the owner.");
  sample(out, "zklock_detector_cycles", static_cast<double>(last_.cycles),
         "Deadlock cycles present at the last scan.");
  sample(out, "zklock_detector_oldest_cycle_scans", static_cast<double>(last_.oldest_cycle_scans),
         "Consecutive scans the longest-lived cycle present at the last scan has been seen in (0: no cycle).");
  sample(out, "zklock_detector_scans_total", static_cast<double>(scans_), "Scans of the mirrored lock tree.", "counter");
  histogram(out, "zklock_detector_scan_duration_seconds", scan_seconds_,
            "Time to analyse one snapshot (graph, cycles, revocations).");
  summary(out, "zklock_detector_scan_recent_seconds",
          std::vector<double>(recent_.begin(), recent_.begin() + std::min<std::uint64_t>(scans_, kRecentScans)),
          scan_seconds_.sum, scans_,
          "Time to analyse one snapshot: quantiles 0.5, 0.99 and 1 (max) over the last 128 scans.");
  sample(out, "zklock_detector_cycles_detected_total", static_cast<double>(cycles_),
         "Deadlock cycles found (counted once per scan that sees them).", "counter");
  histogram(out, "zklock_detector_detection_latency_seconds", latency_seconds_,
            "From the creation of a cycle's youngest node to its detection.");
  header(out, "zklock_detector_revocations_total", "counter",
         "Revocation attempts by policy and outcome (revoked, aborted, deposed, failed, dry_run).");
  for (const auto& [key, v] : revocations_) {
    out += "zklock_detector_revocations_total{policy=\"" + label_value(key.first) + "\",outcome=\"" +
           label_value(key.second) + "\"} " + std::to_string(v) + "\n";
  }
  std::uint64_t aborted = 0;
  for (const auto& [key, v] : revocations_) {
    if (key.second == "aborted") aborted += v;
  }
  sample(out, "zklock_detector_revocations_aborted_total", static_cast<double>(aborted),
         "Revocations not performed because the cycle changed after the snapshot.", "counter");
  sample(out, "zklock_detector_mirror_nodes", static_cast<double>(mirror_.nodes), "Lock nodes in the mirror.");
  sample(out, "zklock_detector_mirror_dirs", static_cast<double>(mirror_.dirs), "Directories (watched znodes) in the mirror.");
  sample(out, "zklock_detector_mirror_load_seconds", mirror_.load_seconds,
         "Seconds from the mirror's start (or a new session's re-mirror) until it was first idle (0: loading).");
  sample(out, "zklock_detector_mirror_pending_reads", static_cast<double>(mirror_.pending),
         "Mirror reads queued or in flight.");
  sample(out, "zklock_detector_mirror_reads_total", static_cast<double>(mirror_.ops_issued),
         "ZooKeeper reads issued by the mirror.", "counter");
  sample(out, "zklock_detector_mirror_resyncs_total", static_cast<double>(mirror_.resyncs),
         "Full re-lists of the lock tree (periodic and after a new session).", "counter");
  sample(out, "zklock_detector_mirror_skipped_dirs_total", static_cast<double>(mirror_.skipped_dirs),
         "Directories skipped: too many children, no READ permission, or too deep.", "counter");
  sample(out, "zklock_detector_mirror_sessions", static_cast<double>(mirror_.session_watch_bytes.size()),
         "ZooKeeper sessions the mirror watches through (the daemon's own included).");
  sample(out, "zklock_detector_mirror_max_session_watch_bytes", static_cast<double>(mirror_.max_session_watch_bytes()),
         "Watched path bytes of the mirror's fullest session (its SetWatches on reconnect).");
  sample(out, "zklock_detector_mirror_bad_node_data_total", static_cast<double>(mirror_.bad_data),
         "Lock nodes whose data was malformed, oversized or named another owner.", "counter");
  return out;
}

struct MetricsServer::Impl {
  httplib::Server server;
  std::thread thread;
};

MetricsServer::MetricsServer(const Metrics& metrics, std::string host, int port,
                             std::function<std::string()> healthy, StatusBoard* status)
    : impl_(std::make_unique<Impl>()) {
  if (status) {
    // The page may run only its own inline script and style, and fetch only
    // from this endpoint (docs/operations.md, "The status page").
    const auto page_headers = [](httplib::Response& res) {
      res.set_header("Cache-Control", "no-store");
      res.set_header("X-Content-Type-Options", "nosniff");
      res.set_header("Content-Security-Policy",
                     "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                     "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
    };
    impl_->server.Get("/", [status, page_headers](const httplib::Request&, httplib::Response& res) {
      page_headers(res);
      res.set_content(status->html(), "text/html; charset=utf-8");
    });
    impl_->server.Get("/api/state", [status, page_headers](const httplib::Request&, httplib::Response& res) {
      page_headers(res);
      res.set_content(status->json(), "application/json");
    });
  }
  impl_->server.Get("/metrics", [&metrics](const httplib::Request&, httplib::Response& res) {
    res.set_content(metrics.render(), "text/plain; version=0.0.4; charset=utf-8");
  });
  impl_->server.Get("/healthz", [healthy = std::move(healthy)](const httplib::Request&, httplib::Response& res) {
    const auto problem = healthy ? healthy() : std::string();
    res.status = problem.empty() ? 200 : 503;
    res.set_content(problem.empty() ? "ok\n" : problem + "\n", "text/plain");
  });
  port_ = port == 0 ? impl_->server.bind_to_any_port(host.c_str())
                    : (impl_->server.bind_to_port(host.c_str(), port) ? port : -1);
  if (port_ < 0) {
    throw Error(Errc::io_error, "metrics: cannot listen on " + host + ":" + std::to_string(port));
  }
  impl_->thread = std::thread([this] { impl_->server.listen_after_bind(); });
}

MetricsServer::~MetricsServer() {
  impl_->server.stop();
  if (impl_->thread.joinable()) impl_->thread.join();
}

}  // namespace zklock::detector
