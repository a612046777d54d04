// A detector Daemon running on its own thread for the integration tests,
// collecting every cycle report it makes.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "detector/daemon.hpp"

namespace zklock::test {

class RunningDaemon {
 public:
  // Constructs the daemon (connects, starts mirroring) and runs it until
  // destruction.
  explicit RunningDaemon(detector::DetectorConfig cfg) : daemon_(std::move(cfg)) {
    daemon_.on_cycle = [this](const detector::CycleReport& r) {
      std::lock_guard lock(mu_);
      reports_.push_back(r);
      cv_.notify_all();
    };
    thread_ = std::thread([this] { daemon_.run(); });
  }
  ~RunningDaemon() {
    daemon_.stop();
    thread_.join();
  }
  RunningDaemon(const RunningDaemon&) = delete;
  RunningDaemon& operator=(const RunningDaemon&) = delete;

  detector::Daemon& daemon() { return daemon_; }
  const detector::DetectorConfig& cfg() const { return daemon_.config(); }

  // Waits (bounded) until `n` reports with outcome `outcome` arrived; returns
  // those that did.
  std::vector<detector::CycleReport> wait_for(const std::string& outcome, std::size_t n,
                                              std::chrono::milliseconds timeout) {
    std::unique_lock lock(mu_);
    std::vector<detector::CycleReport> out;
    cv_.wait_for(lock, timeout, [&] {
      out.clear();
      for (const auto& r : reports_) {
        if (r.outcome == outcome) out.push_back(r);
      }
      return out.size() >= n;
    });
    return out;
  }
  std::size_t count(const std::string& outcome) {
    std::lock_guard lock(mu_);
    return static_cast<std::size_t>(std::count_if(reports_.begin(), reports_.end(),
                                                  [&](const detector::CycleReport& r) { return r.outcome == outcome; }));
  }
  // Reports so far, by outcome.
  std::map<std::string, std::size_t> outcomes() {
    std::lock_guard lock(mu_);
    std::map<std::string, std::size_t> m;
    for (const auto& r : reports_) ++m[r.outcome];
    return m;
  }

 private:
  detector::Daemon daemon_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<detector::CycleReport> reports_;
  std::thread thread_;
};

}  // namespace zklock::test
