// The platform's detector process, server readings and planted cycles
// (platform_parts.hpp).
#include <unistd.h>


#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "child_process.hpp"
#include "http_get.hpp"
#include "platform_parts.hpp"
#include "proc_status.hpp"
#include "zk_net.hpp"
#include "zklock/fair_mutex.hpp"

#ifndef ZKLOCK_DETECTOR_BINARY
#error "ZKLOCK_DETECTOR_BINARY must name the zklock-detector executable"
#endif

namespace zklock::bench {

using namespace std::chrono_literals;

namespace {

// Fields 14 and 15 of /proc/PID/stat (utime, stime) in clock ticks.
double stat_cpu(const std::string& file) {
  std::ifstream in(file);
  std::string text((std::istreambuf_iterator<char>(in)), {});
  const auto close = text.rfind(')');
  if (close == std::string::npos) return kNone;
  std::istringstream rest(text.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && rest >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

}  // namespace

double proc_cpu_seconds(pid_t pid) {
  return pid > 0 ? stat_cpu("/proc/" + std::to_string(pid) + "/stat") : kNone;
}

double proc_rss_mb(pid_t pid) {
  const long kb = pid > 0 ? test::proc_status_kb("VmRSS", pid) : -1;
  return kb < 0 ? kNone : static_cast<double>(kb) / 1024.0;
}

DetectorRun::DetectorRun(const Env& env, const std::string& root, int load_sessions)
    : port_(test::free_loopback_port()) {
  log_ = (std::filesystem::temp_directory_path() / ("zklock-bench-detector-" + std::to_string(::getpid()) + ".log")).string();
  test::SpawnOptions so;
  so.argv = {ZKLOCK_DETECTOR_BINARY, "--zk", env.connect, "--root", root, "--interval", "1s",
             "--metrics-host", "127.0.0.1", "--metrics-port", std::to_string(port_), "--log-level", "warn"};
  if (load_sessions > 0) so.argv.insert(so.argv.end(), {"--load-sessions", std::to_string(load_sessions)});
  so.output_file = log_;
  so.capture_stdout = false;
  child_ = std::make_unique<test::ChildProcess>(test::ChildProcess::spawn(so));
}

DetectorRun::~DetectorRun() { stop(); }

void DetectorRun::stop() {
  if (!child_) return;
  child_->terminate(10s);
  child_.reset();
  std::error_code ec;
  std::filesystem::remove(log_, ec);
}


std::map<std::string, double> DetectorRun::scrape() {
  std::map<std::string, double> out;
  const auto got = test::http_get(port_, "/metrics");
  if (!got) return out;
  std::istringstream in(got->body);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#' || !line.starts_with("zklock_")) continue;
    const auto sp = line.rfind(' ');
    if (sp == std::string::npos) continue;
    try {
      out[line.substr(0, sp)] = std::stod(line.substr(sp + 1));
    } catch (const std::exception&) {
    }
  }
  return out;
}

namespace {
double get(const std::map<std::string, double>& m, const std::string& key) {
  auto it = m.find(key);
  return it == m.end() ? kNone : it->second;
}
// The sum over every label set of one metric.
double sum(const std::map<std::string, double>& m, const std::string& name) {
  double s = 0;
  bool any = false;
  for (auto it = m.lower_bound(name); it != m.end() && it->first.starts_with(name); ++it) {
    if (it->first.size() == name.size() || it->first[name.size()] == '{') {
      s += it->second;
      any = true;
    }
  }
  return any ? s : kNone;
}
}  // namespace

DetectorRun::Load DetectorRun::wait_loaded(std::size_t nodes, std::chrono::milliseconds limit) {
  const auto t0 = Clock::now();
  while (Clock::now() - t0 < limit) {
    if (!child_->running()) throw std::runtime_error("zklock-detector exited; its log: " + log_);
    const auto m = scrape();
    if (get(m, "zklock_detector_mirror_nodes") >= double(nodes) && get(m, "zklock_detector_mirror_pending_reads") == 0) {
      return {seconds(Clock::now() - t0), get(m, "zklock_detector_mirror_reads_total"), proc_rss_mb(child_->pid())};
    }
    std::this_thread::sleep_for(20ms);
  }
  throw std::runtime_error("zklock-detector did not load " + std::to_string(nodes) + " nodes in time");
}

DetectorRun::Reading DetectorRun::reading() {
  const auto m = scrape();
  if (m.empty()) std::fprintf(stderr, "  platform: the detector's metrics did not answer\n");
  Reading r;
  r.cpu_s = proc_cpu_seconds(child_->pid());
  r.rss_mb = proc_rss_mb(child_->pid());
  r.reads = get(m, "zklock_detector_mirror_reads_total");
  r.scans = get(m, "zklock_detector_scans_total");
  r.revocations = get(m, "zklock_detector_revocations_total{policy=\"youngest\",outcome=\"revoked\"}");
  if (std::isnan(r.revocations)) r.revocations = sum(m, "zklock_detector_revocations_total");
  r.cycles_detected = get(m, "zklock_detector_cycles_detected_total");
  r.scan_p50_ms = get(m, "zklock_detector_scan_recent_seconds{quantile=\"0.5\"}") * 1e3;
  r.scan_max_ms = get(m, "zklock_detector_scan_recent_seconds{quantile=\"1\"}") * 1e3;
  r.latency_sum_s = get(m, "zklock_detector_detection_latency_seconds_sum");
  r.latency_count = get(m, "zklock_detector_detection_latency_seconds_count");
  return r;
}

ServerReading ServerReading::take(const Env& env, DetectorRun& detector) {
  ServerReading r;
  r.at = Clock::now();
  r.zxid = server_zxid(env);
  r.requests = Traffic::from(env.mntr()).packets_received;
  r.server_cpu_s = proc_cpu_seconds(env.server_pid);
  r.detector_cpu_s = detector.reading().cpu_s;
  return r;
}

CycleResult plant_cycles(const Env& env, const std::string& root, Clock::time_point from, Clock::time_point to,
                         int n) {
  Client client(ClientOptions{.connect = env.connect, .session_timeout = 10s});
  client.ensure_path(root + "/cycles", CreateMode::persistent);
  CycleResult out;
  for (int k = 0; k < n; ++k) {
    std::this_thread::sleep_until(from + (to - from) * (2 * k + 1) / (2 * n));
    const auto base = root + "/cycles/c" + std::to_string(k);
    FairMutex x(client, base + "-x"), y(client, base + "-y");
    const AcquireOptions a{.owner = "cycle" + std::to_string(k) + "-a"}, b{.owner = "cycle" + std::to_string(k) + "-b"};
    Lease ax = x.acquire(a), by = y.acquire(b);
    std::mutex mu;
    std::condition_variable cv;
    std::optional<AcquireResult> ra, rb;
    std::optional<Clock::time_point> told;
    auto on = [&](std::optional<AcquireResult>& slot) {
      return [&](AcquireResult r) {
        std::lock_guard lk(mu);
        if (r.error && r.error->code() == Errc::deadlock_victim && !told) told = Clock::now();
        slot = std::move(r);
        cv.notify_all();
      };
    };
    y.acquire_async(on(ra), a);  // a waits for b
    x.acquire_async(on(rb), b);  // b waits for a: the cycle is closed
    const auto closed = Clock::now();
    ++out.planted;
    std::unique_lock lk(mu);
    if (!cv.wait_for(lk, 60s, [&] { return ra || rb; })) {
      ++out.other_errors;  // never broken: the figure shows it
      lk.unlock();
      ax.release();
      by.release();
      lk.lock();
      cv.wait_for(lk, 30s, [&] { return ra && rb; });
      continue;
    }
    const bool a_first = ra.has_value();
    auto& first = a_first ? *ra : *rb;
    if (first.error && first.error->code() == Errc::deadlock_victim) {
      ++out.victims;
      out.latency_ms.push_back(seconds(*told - closed) * 1e3);
    } else {
      ++out.other_errors;
    }
    lk.unlock();
    // The victim gives up its hold; the survivor is then granted.
    (a_first ? ax : by).release();
    lk.lock();
    if (!cv.wait_for(lk, 60s, [&] { return ra && rb; })) ++out.other_errors;
    auto& second = a_first ? rb : ra;
    if (second && second->error) ++out.other_errors;
    lk.unlock();
    if (second && second->lease) second->lease.release();
    ax.release();
    by.release();
  }
  return out;
}

}  // namespace zklock::bench
