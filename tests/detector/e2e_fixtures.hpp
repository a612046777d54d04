// The end-to-end detector tests' shared fixtures (zklock_detector_e2e_tests):
// owners taking real FairMutex / FairSharedMutex locks asynchronously
// (Request, Actor, cross_order), the victim's and the detector's latency
// checks, the detector in-process (config, Running) and the zklock-detector
// binary in a child process (DetectorProcess, detector_args).
//
// Every scenario that closes a cycle prints its detection latency twice:
// the detector's own figure (youngest cycle node's creation -> detection) and
// the victim's (cycle closed -> its acquire failed); both must stay within
// min-wait + interval + 1 s (latency_bound).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "detector/daemon.hpp"
#include "detector_fixtures.hpp"
#include "zk_harness.hpp"
#include "zklock/fair_mutex.hpp"
#include "zklock/shared_mutex.hpp"

namespace zklock::detector::e2e {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using test::eventually;
using test::TempDir;

double secs(Clock::duration d);

// Throws (the test fails with the message) unless `ok`.
void require(bool ok, const std::string& what);

// A session on `connect` with a 4 s timeout.
ClientOptions session(const std::string& connect, std::optional<DigestCredentials> creds = std::nullopt);

// ---------------------------------------------------------------------------
// Owners acting through the real lock

// One asynchronous acquisition, waited on with a deadline.
class Request {
 public:
  Request() : s_(std::make_shared<State>()) {}
  AcquireCallback callback() const {
    return [s = s_](AcquireResult r) {
      std::lock_guard lk(s->mu);
      s->result = std::move(r);
      s->at = Clock::now();
      s->cv.notify_all();
    };
  }
  bool wait(milliseconds timeout) const {
    std::unique_lock lk(s_->mu);
    return s_->cv.wait_for(lk, timeout, [&] { return s_->result.has_value(); });
  }
  bool done() const {
    std::lock_guard lk(s_->mu);
    return s_->result.has_value();
  }
  bool granted() const {
    std::lock_guard lk(s_->mu);
    return s_->result && !s_->result->error;
  }
  std::optional<Errc> error() const {
    std::lock_guard lk(s_->mu);
    if (!s_->result || !s_->result->error) return std::nullopt;
    return s_->result->error->code();
  }
  std::string message() const {
    std::lock_guard lk(s_->mu);
    if (!s_->result) return "(pending)";
    return s_->result->error ? s_->result->error->what() : "(granted)";
  }
  Clock::time_point at() const {
    std::lock_guard lk(s_->mu);
    return s_->at;
  }
  Lease take_lease() {
    std::lock_guard lk(s_->mu);
    return s_->result ? std::move(s_->result->lease) : Lease{};
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<AcquireResult> result;
    Clock::time_point at;
  };
  std::shared_ptr<State> s_;
};

// An owner id taking real locks on one Client, asynchronously, so one test
// thread can stage a deadlock step by step. Requests are cancelled and
// leases released (on the test thread) when the Actor dies.
class Actor {
 public:
  Actor(Client& client, std::string owner, int priority = 0, bool read_write = false)
      : client_(client), owner_(std::move(owner)), priority_(priority), read_write_(read_write) {}
  ~Actor();
  Actor(const Actor&) = delete;
  Actor& operator=(const Actor&) = delete;

  const std::string& owner() const { return owner_; }
  Client& client() { return client_; }

  // Starts an acquisition; returns at once.
  Request start(const std::string& lock, Mode mode = Mode::exclusive);
  // Acquires and keeps the lease. Throws unless granted within 20 s.
  void hold(const std::string& lock, Mode mode = Mode::exclusive);
  // Starts an acquisition that must wait; returns once its node is queued
  // (visible on ZooKeeper), so the order of waits is the order of calls.
  Request enqueue(const std::string& lock, Mode mode = Mode::exclusive);
  // Moves a granted request's lease into the held set.
  void keep(Request& r) { leases_.push_back(r.take_lease()); }
  std::vector<Lease>& leases() { return leases_; }
  // Backs off: releases every lease held.
  void release_all() {
    for (auto& l : leases_) l.release();
    leases_.clear();
  }

 private:
  std::size_t own_nodes(const std::string& lock);

  Client& client_;
  std::string owner_;
  int priority_;
  bool read_write_;
  std::stop_source stop_;
  std::deque<std::unique_ptr<FairMutex>> mutexes_;
  std::deque<std::unique_ptr<FairSharedMutex>> shared_;
  std::vector<Request> requests_;
  std::vector<Lease> leases_;
};

// The classic deadlock with real locks: A holds x, B holds y; A asks for y,
// then B asks for x. B's wait is the youngest node of the cycle.
struct CrossOrder {
  Request a_waits, b_waits;
  Clock::time_point closed;  // B's node queued: the cycle exists from here on
};
CrossOrder cross_order(Actor& a, Actor& b, const std::string& x, const std::string& y);

inline milliseconds latency_bound(milliseconds min_wait, milliseconds interval) {
  return min_wait + interval + std::chrono::seconds(1);
}

// The victim's view: its acquire failed with deadlock_victim, carrying the
// cycle, within the bound after the cycle closed. Prints the latency.
void expect_victim(const Request& r, Clock::time_point closed, const std::string& cycle, milliseconds bound,
                   const std::string& label);

void expect_granted(const Request& r, const std::string& label);

// ---------------------------------------------------------------------------
// The detector in-process

// A 200 ms interval, a 500 ms min-wait, a 4 s session timeout.
DetectorConfig config(const std::string& zk, const std::string& root, const std::string& id);

// Runs a Daemon on its own thread and collects its cycle reports.
using Running = test::RunningDaemon;

void print_report(const CycleReport& r, const DetectorConfig& cfg, const std::string& label);

// Waits for the first revocation report and checks it names `victim`.
void expect_revoked(Running& run, const std::string& victim, const std::string& label);

// ---------------------------------------------------------------------------
// The detector binary

// zklock-detector in a child process; its log (stderr) goes to a file that
// the test reads line by line.
class DetectorProcess {
 public:
  DetectorProcess(const fs::path& dir, const std::string& name, std::vector<std::string> args);
  test::ChildProcess& child() { return child_; }
  std::string log() const { return test::read_file(log_); }
  // The first log line containing every needle, waiting up to `timeout`.
  std::optional<std::string> wait_line(const std::vector<std::string>& needles, milliseconds timeout) const;

 private:
  fs::path log_;
  test::ChildProcess child_;
};

// "... | detection latency 0.612 s" -> 0.612
std::optional<double> logged_latency(const std::string& line);

void print_logged_latency(const std::string& line, milliseconds bound, const std::string& label);

// --zk, --root, --id and the in-process config's timings.
std::vector<std::string> detector_args(const std::string& zk, const std::string& root, const std::string& id);

// The candidate node (under /zklock/detector) whose data is `id`, if any.
std::optional<std::string> candidate_of(Client& c, const std::string& id);

}  // namespace zklock::detector::e2e
