// The scenarios of zklock-bench. Each runs zklock and the floor (floor.hpp)
// back to back on the same server in one call and returns the figures of
// that run; main.cpp repeats runs and reports medians. docs/performance.md
// explains every figure.
#pragma once

#include <cstddef>
#include <vector>

#include "measure.hpp"

namespace zklock::bench {

// The seed's platform (platform.cpp).
struct PlatformSizes {
  int owners = 10000;       // each with its own retained lock
  int processes = 10;       // owner processes, one Client each
  int threads = 2;          // driver threads per owner process
  int rate_hz = 10;         // acquisitions per owner per second
  int held = 4;             // long-lived locks per owner
  // Idle retention: the owners' locks are idle between the build and the
  // window, and must still be retained when the detector loads its mirror
  // (at full scale that outlasts a few seconds); in the window each is
  // re-taken every 1/rate_hz.
  int retain_ms = 120000;
  int hot_locks = 10;
  int hot_contenders = 100;  // per hot lock
  int hot_sessions = 20;
  int work_ms = 5;          // a hot holder's work inside the lock
  int cycles = 3;           // two-owner cycles planted in the window
  double warmup_s = 5, window_s = 60, alone_s = 15;
  // The floor's step-up: owner rates from floor_start doubling to floor_max.
  double floor_start = 100, floor_max = 64000, floor_warmup_s = 1, floor_step_s = 4;
};

struct Sizes {
  int uncontended_cycles = 2000;
  int contended_sessions = 8;
  int contended_cycles = 200;  // per session
  std::vector<int> drain_waiters{100, 1000, 5000};
  int drain_sessions = 20;
  int pipelined_locks = 1000;
  std::vector<int> handoff_contenders{2, 4, 16};
  int handoff_cycles = 100;  // per contender
  double fence_seconds = 1.0;
  // Detector at scale.
  int detector_dirs = 100;
  int detector_locks_per_dir = 500;
  int detector_waiters = 1000;
  int detector_cycles = 10;
  int detector_inflight = 0;  // the mirror's reads outstanding; 0: the detector's default
  int detector_load_sessions = 0;  // the mirror's load sessions; 0: the detector's default
  int detector_floor_sessions = 4;  // the listing floor's parallel sessions (it also runs on one)
  int detector_scan_contended = 100;  // detector-scan: queues with a holder and a waiter
  // Restart at scale (restart.cpp): lock dirs, one held node each.
  int restart_dirs = 100000;
  // Retained leases (retained.cpp): local re-takes of one lock, then `services`.
  int retakes = 100000;
  int services_sessions = 200;
  int services_waiters = 20;  // per hot lock (5 hot locks)
  double services_seconds = 10;
  PlatformSizes platform;

  static Sizes quick();  // scenario_support.cpp
};

Figures uncontended(const Env& env, const Sizes& s);        // uncontended.cpp
Figures contended(const Env& env, const Sizes& s);          // contended.cpp
Figures drain(const Env& env, const Sizes& s);              // drain.cpp
Figures pipelined(const Env& env, const Sizes& s);          // pipelined.cpp
Figures handoff(const Env& env, const Sizes& s);            // contended.cpp
Figures op_costs(const Env& env, const Sizes& s);           // op_costs.cpp
Figures fence_gate(const Env& env, const Sizes& s);         // fence_gate.cpp
Figures detector_at_scale(const Env& env, const Sizes& s);  // detector_scale.cpp
Figures detector_scan(const Env& env, const Sizes& s);      // detector_scan.cpp (no server)
Figures retained(const Env& env, const Sizes& s);           // retained.cpp
Figures services(const Env& env, const Sizes& s);           // retained.cpp
Figures platform(const Env& env, const Sizes& s);           // platform.cpp
Figures restart(const Env& env, const Sizes& s);            // restart.cpp (its own server)

// The server's last zxid (`srvr`): one per committed write transaction.
std::int64_t server_zxid(const Env& env);  // retained.cpp

// One side of an interleaved comparison (uncontended.cpp): acquire and release one lock.
struct CycleFns {
  std::function<void()> acquire, release;
};
struct CycleSide {
  std::vector<double> cycle_us, acquire_us, release_us;
  double seconds = 0, cpu = 0, switches = 0;
  Traffic traffic;
};
// `n` cycles of each side in alternating blocks of `block`, so both sides
// see the same background load; traffic and CPU attributed per side.
std::pair<CycleSide, CycleSide> interleaved_cycles(const Env& env, int n, const CycleFns& a, const CycleFns& b,
                                                   int block = 20);

}  // namespace zklock::bench
