// PrometheusObserver: a zklock::LockObserver that counts what a Client's
// locks do and renders it in the Prometheus text format, with the names of
// zklock-detector's metrics (docs/operations.md) under `zklock_client_`.
//
// Thread-safety: the callbacks come from zklock's threads, concurrently
// (observer.hpp); render() from the HTTP server's. One mutex, held only to
// add a number or copy the figures: nothing blocks under it.
//
// No per-lock labels: one series per client keeps the cardinality fixed
// however many lock paths a service uses.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "zklock/observer.hpp"

namespace metrics_exporter {

// A cumulative histogram of seconds (bounds ascending; +Inf implied).
struct Histogram {
  std::vector<double> bounds;
  std::vector<std::uint64_t> counts;  // per bound, not cumulative
  double sum = 0;
  std::uint64_t count = 0;
  void observe(double seconds);
};

class PrometheusObserver final : public zklock::LockObserver {
 public:
  PrometheusObserver();

  void acquire_started(std::string_view lock_path) override;
  void granted(std::string_view lock_path, Duration wait, bool retained) override;
  void failed(std::string_view lock_path, Duration wait, zklock::Errc code) override;
  void released(std::string_view lock_path, Duration held) override;
  void lost(std::string_view lock_path, zklock::LossReason reason) override;
  void validity_lapsed(std::int64_t session_id) override;
  void diverged_server(std::string_view lock_path, std::string_view detail) override;
  void reconnect_loop(std::int64_t session_id, std::string_view cause) override;

  // The exporter's own loop: cycles it completed.
  void cycle_done();
  // Every metric, Prometheus text format 0.0.4.
  std::string render() const;

 private:
  mutable std::mutex mu_;
  Histogram wait_;  // GUARDED_BY(mu_): granted and failed acquisitions
  Histogram hold_;  // GUARDED_BY(mu_)
  std::uint64_t started_ = 0, grants_round_trip_ = 0, grants_retained_ = 0, releases_ = 0, lapses_ = 0,
                diverged_ = 0, reconnect_loops_ = 0, cycles_ = 0;    // GUARDED_BY(mu_)
  std::map<std::string, std::uint64_t> failures_;    // GUARDED_BY(mu_): by errc_name
  std::map<std::string, std::uint64_t> losses_;      // GUARDED_BY(mu_): by loss_reason_name
};

}  // namespace metrics_exporter
