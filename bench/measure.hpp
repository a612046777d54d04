// Measurement helpers for zklock-bench: sample percentiles, process CPU
// time, server traffic from `mntr`, and the figures a scenario reports.
#pragma once

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "zk_harness.hpp"

namespace zklock::bench {

using Clock = std::chrono::steady_clock;
inline constexpr double kNone = std::numeric_limits<double>::quiet_NaN();

inline double micros(Clock::duration d) { return std::chrono::duration<double, std::micro>(d).count(); }
inline double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Nearest-rank percentile of `v` (copied and sorted); NaN when empty.
inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return kNone;
  std::sort(v.begin(), v.end());
  const auto rank = static_cast<std::size_t>(std::ceil(p / 100.0 * static_cast<double>(v.size())));
  return v[std::clamp<std::size_t>(rank, 1, v.size()) - 1];
}
inline double median(std::vector<double> v) {
  std::erase_if(v, [](double x) { return std::isnan(x); });
  if (v.empty()) return kNone;
  std::sort(v.begin(), v.end());
  const auto n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

// User + system CPU of this whole process (every client thread: the C
// client's I/O and completion threads, zklock's timer and callback threads).
// The server is another process and is not counted.
inline double process_cpu_seconds() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  auto tv = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) / 1e6; };
  return tv(ru.ru_utime) + tv(ru.ru_stime);
}

// Context switches of this whole process (voluntary + involuntary): on a
// client that mostly waits for replies, each thread hand-off costs one, and
// they, not zklock's code, dominate client CPU (kernel scheduling time).
inline double process_context_switches() {
  rusage ru{};
  getrusage(RUSAGE_SELF, &ru);
  return static_cast<double>(ru.ru_nvcsw + ru.ru_nivcsw);
}

// Client traffic as the server counts it (cumulative mntr counters).
struct Traffic {
  std::int64_t packets_received = 0;  // requests (incl. pings) from clients
  std::int64_t packets_sent = 0;      // replies and notifications to clients
  std::int64_t response_bytes = 0;    // reply bytes
  std::int64_t watch_bytes = 0;       // watch-notification bytes

  static Traffic from(const zklock::test::Mntr& m) {
    Traffic t;
    t.packets_received = m.counter("zk_packets_received").value_or(0);
    t.packets_sent = m.counter("zk_packets_sent").value_or(0);
    t.response_bytes = m.counter("zk_response_bytes").value_or(0);
    t.watch_bytes = m.counter("zk_watch_bytes").value_or(0);
    return t;
  }
  // The difference between two readings, less the second reading's own
  // cost: one `mntr` call counts 1 packet received and 2 sent (measured on
  // the Debian 3.8 server; it adds no response or watch bytes).
  Traffic operator-(const Traffic& o) const {
    return {packets_received - o.packets_received - kMntrReceived, packets_sent - o.packets_sent - kMntrSent,
            response_bytes - o.response_bytes, watch_bytes - o.watch_bytes};
  }
  static constexpr std::int64_t kMntrReceived = 1, kMntrSent = 2;
  std::int64_t packets() const { return packets_received + packets_sent; }
  std::int64_t bytes_to_clients() const { return response_bytes + watch_bytes; }
};

// How a figure is judged against its target (on the medians).
struct Target {
  enum class Kind { none, ratio_le, ratio_ge, value_le, value_ge } kind = Kind::none;
  double bound = 0;
  static Target none() { return {}; }
  static Target ratio_le(double b) { return {Kind::ratio_le, b}; }
  static Target ratio_ge(double b) { return {Kind::ratio_ge, b}; }
  static Target value_le(double b) { return {Kind::value_le, b}; }
  static Target value_ge(double b) { return {Kind::value_ge, b}; }
};

// One figure of one run: zklock's value and, where there is one, the floor's
// (NaN otherwise). ratio = zklock / floor.
struct Figure {
  std::string scenario;
  std::string name;
  std::string unit;
  double zklock = kNone;
  double floor = kNone;
  Target target;
  // Non-empty: also written as "<scenario group>.<key>" in the JSON's group
  // object (e.g. "platform": {"lock_ops_per_s": ...}), from the zklock
  // column, or the floor's when key_from_floor.
  std::string key;
  bool key_from_floor = false;
};
using Figures = std::vector<Figure>;

// What every scenario gets.
struct Env {
  std::string connect;                          // "127.0.0.1:PORT"
  std::function<zklock::test::Mntr()> mntr;     // the server's counters now
  bool quick = false;
  int run = 0;                                  // 0-based run index (alternates who goes first)
  std::string root;                             // a fresh node path for this run
  int server_pid = 0;                           // the server's JVM when the tool started it, else 0
  std::function<void(const std::string&)> log;  // progress to stderr
};

// Waits until the server and this process are quiet: packets_received
// unchanged and under 5 % CPU over `still` (bounded by `limit`). Used between phases so one phase's stragglers are not
// counted in the next.
inline void settle(const Env& env, std::chrono::milliseconds still = std::chrono::milliseconds(200),
                   std::chrono::milliseconds limit = std::chrono::seconds(30)) {
  const auto deadline = Clock::now() + limit;
  auto last = Traffic::from(env.mntr()).packets_received;
  auto last_cpu = process_cpu_seconds();
  while (Clock::now() < deadline) {
    std::this_thread::sleep_for(still);
    const auto now = Traffic::from(env.mntr()).packets_received;
    const auto cpu = process_cpu_seconds();
    // Only our own mntr reached the server, and this process is idle too (a
    // client may still be working through large answers it already has).
    const bool client_idle = cpu - last_cpu < 0.05 * std::chrono::duration<double>(still).count();
    if (now - last <= Traffic::kMntrReceived && client_idle) return;
    last = now;
    last_cpu = cpu;
  }
}

}  // namespace zklock::bench
