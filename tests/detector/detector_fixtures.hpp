// The detector tests' shared fixtures: a detector Daemon running on its own
// thread, collecting every cycle report it makes (RunningDaemon: both
// zklock_detector_tests and zklock_detector_e2e_tests), and the planted-node
// owners of zklock_detector_tests (namespace zklock::detector::planted).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "detector/daemon.hpp"
#include "zk_harness.hpp"
#include "zklock/client.hpp"
#include "zklock/protocol/node_data.hpp"
#include "zklock/protocol/node_name.hpp"

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

// Cycles planted by creating lock nodes directly (EPHEMERAL_SEQUENTIAL
// children with zklock names and data, one session per owner): exactly how
// a client in another language would appear to the detector.
namespace zklock::detector::planted {

// Runs a Daemon on its own thread and collects its cycle reports.
using Running = test::RunningDaemon;

// One owner: its own session, so its nodes live and die with it.
class Owner {
 public:
  explicit Owner(std::string id, int priority = 0)
      : id_(std::move(id)), priority_(priority),
        client_(ClientOptions{.connect = test::shared_server().connect_string(),
                              .session_timeout = std::chrono::seconds(6)}) {}

  // Creates a lock node on `lock` and returns its full path.
  std::string enqueue(const std::string& lock, Mode mode) {
    client_.ensure_path(lock, CreateMode::persistent);
    protocol::NodeData d{id_, "testhost", 1, mode, priority_, ""};
    const auto prefix = lock + "/" + protocol::lock_node_prefix(mode, protocol::owner_key(id_), protocol::new_guid());
    std::promise<std::pair<Status, std::string>> p;
    client_.create_async(prefix, protocol::encode_node_data(d), CreateMode::ephemeral_sequential,
                         [&p](Status s, const std::string& path, const Stat&) { p.set_value({s, path}); });
    auto [s, path] = p.get_future().get();
    if (!s.ok()) throw s.error("create " + prefix);
    return path;
  }
  std::string hold(const std::string& lock) { return enqueue(lock, Mode::exclusive); }
  Client& client() { return client_; }
  const std::string& id() const { return id_; }

 private:
  std::string id_;
  int priority_;
  Client client_;
};

inline bool exists(Client& c, const std::string& path) { return c.try_stat(path).has_value(); }

inline void remove_node(Client& c, const std::string& path) {
  ASSERT_NO_THROW(c.remove(path)) << path;
}

// The shared server, a 200 ms interval, a 500 ms min-wait, id "detector-test".
inline DetectorConfig config(const std::string& root, Policy policy = Policy::youngest) {
  using namespace std::chrono_literals;
  DetectorConfig cfg;
  cfg.zk = test::shared_server().connect_string();
  cfg.root = root;
  cfg.interval = 200ms;
  cfg.min_wait = 500ms;
  cfg.session_timeout = 4s;
  cfg.policy.policy = policy;
  cfg.id = "detector-test";
  return cfg;
}

// Prints the report's detection latency and checks it against
// min-wait + interval + 1 s.
inline void print_latency(const CycleReport& r, const DetectorConfig& cfg) {
  using namespace std::chrono_literals;
  std::printf("[ detector ] cycle %s -> victim %s, detection latency %.3f s (bound %.3f s)\n", r.text.c_str(),
              r.victim.owner.c_str(), r.latency_seconds,
              std::chrono::duration<double>(cfg.min_wait + cfg.interval + 1s).count());
  EXPECT_LE(r.latency_seconds, std::chrono::duration<double>(cfg.min_wait + cfg.interval + 1s).count());
}

struct TwoCycle {
  std::string a_holds, b_holds, a_waits, b_waits;
};
// A holds X and waits for Y; B holds Y and waits for X; B's wait is younger.
inline TwoCycle plant_two_cycle(Owner& a, Owner& b, const std::string& root) {
  TwoCycle t;
  t.a_holds = a.hold(root + "/x");
  t.b_holds = b.hold(root + "/y");
  t.a_waits = a.enqueue(root + "/y", Mode::exclusive);
  t.b_waits = b.enqueue(root + "/x", Mode::exclusive);
  return t;
}

}  // namespace zklock::detector::planted
