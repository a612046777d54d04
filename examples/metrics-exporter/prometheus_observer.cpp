#include "prometheus_observer.hpp"

#include <chrono>
#include <cstdio>

namespace metrics_exporter {
namespace {

double seconds(zklock::LockObserver::Duration d) { return std::chrono::duration<double>(d).count(); }

std::string num(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g", v);
  return buf;
}

void header(std::string& out, const std::string& name, const char* type, const char* help) {
  out += "# HELP " + name + ' ' + help + "\n# TYPE " + name + ' ' + type + '\n';
}

void counter(std::string& out, const std::string& name, std::uint64_t v, const char* help) {
  header(out, name, "counter", help);
  out += name + ' ' + std::to_string(v) + '\n';
}

// One counter family with one label; `values` may be empty (no series yet).
void labelled(std::string& out, const std::string& name, const char* label,
              const std::map<std::string, std::uint64_t>& values, const char* help) {
  header(out, name, "counter", help);
  for (const auto& [key, v] : values) out += name + '{' + label + "=\"" + key + "\"} " + std::to_string(v) + '\n';
}

void histogram(std::string& out, const std::string& name, const Histogram& h, const char* help) {
  header(out, name, "histogram", help);
  std::uint64_t cumulative = 0;
  for (std::size_t i = 0; i < h.bounds.size(); ++i) {
    cumulative += h.counts[i];
    out += name + "_bucket{le=\"" + num(h.bounds[i]) + "\"} " + std::to_string(cumulative) + '\n';
  }
  out += name + "_bucket{le=\"+Inf\"} " + std::to_string(h.count) + '\n';
  out += name + "_sum " + num(h.sum) + '\n';
  out += name + "_count " + std::to_string(h.count) + '\n';
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

PrometheusObserver::PrometheusObserver() {
  // A retained re-take answers in about a millisecond, a contended wait in
  // seconds: the buckets span both.
  wait_.bounds = {0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1, 5, 10, 30};
  wait_.counts.assign(wait_.bounds.size(), 0);
  hold_.bounds = {0.001, 0.01, 0.1, 0.5, 1, 5, 10, 60, 300};
  hold_.counts.assign(hold_.bounds.size(), 0);
}

void PrometheusObserver::acquire_started(std::string_view) {
  std::lock_guard lk(mu_);
  ++started_;
}

void PrometheusObserver::granted(std::string_view, Duration wait, bool retained) {
  std::lock_guard lk(mu_);
  ++(retained ? grants_retained_ : grants_round_trip_);
  wait_.observe(seconds(wait));
}

void PrometheusObserver::failed(std::string_view, Duration wait, zklock::Errc code) {
  std::lock_guard lk(mu_);
  ++failures_[std::string(zklock::errc_name(code))];
  wait_.observe(seconds(wait));
}

void PrometheusObserver::released(std::string_view, Duration held) {
  std::lock_guard lk(mu_);
  ++releases_;
  hold_.observe(seconds(held));
}

void PrometheusObserver::lost(std::string_view, zklock::LossReason reason) {
  std::lock_guard lk(mu_);
  ++losses_[std::string(zklock::loss_reason_name(reason))];
}

void PrometheusObserver::validity_lapsed(std::int64_t) {
  std::lock_guard lk(mu_);
  ++lapses_;
}

void PrometheusObserver::diverged_server(std::string_view, std::string_view) {
  std::lock_guard lk(mu_);
  ++diverged_;
}

void PrometheusObserver::reconnect_loop(std::int64_t, std::string_view) {
  std::lock_guard lk(mu_);
  ++reconnect_loops_;
}

void PrometheusObserver::cycle_done() {
  std::lock_guard lk(mu_);
  ++cycles_;
}

std::string PrometheusObserver::render() const {
  std::lock_guard lk(mu_);
  std::string out;
  counter(out, "zklock_client_acquisitions_started_total", started_, "Lock acquisitions begun.");
  header(out, "zklock_client_grants_total", "counter",
         "Leases granted: through the queue (round_trip) or as a re-take of a retained node (retained).");
  out += "zklock_client_grants_total{kind=\"round_trip\"} " + std::to_string(grants_round_trip_) + '\n';
  out += "zklock_client_grants_total{kind=\"retained\"} " + std::to_string(grants_retained_) + '\n';
  labelled(out, "zklock_client_failures_total", "code", failures_, "Acquisitions that ended without a lease, by error.");
  counter(out, "zklock_client_releases_total", releases_, "Leases released by their holder.");
  labelled(out, "zklock_client_losses_total", "reason", losses_, "Held leases lost, by reason.");
  counter(out, "zklock_client_validity_lapses_total", lapses_,
          "Times the session's validity bound passed without a committed write raising it.");
  counter(out, "zklock_client_diverged_servers_total", diverged_,
          "Waits that found their server listing a lock node the leader says is gone.");
  counter(out, "zklock_client_reconnect_loops_total", reconnect_loops_,
          "Sessions ended because their connections kept closing before any answer for a session timeout.");
  histogram(out, "zklock_client_acquire_wait_seconds", wait_,
            "Time from the start of an acquisition to its grant or failure.");
  histogram(out, "zklock_client_hold_seconds", hold_, "Time from a grant to its release.");
  counter(out, "zklock_client_exporter_cycles_total", cycles_, "Acquire/release cycles this exporter completed.");
  return out;
}

}  // namespace metrics_exporter
