// Sizes::quick (scenarios.hpp) and the helpers of scenario_support.hpp.
#include "scenario_support.hpp"

#include "scenarios.hpp"

namespace zklock::bench {

Sizes Sizes::quick() {
  Sizes s;
  s.uncontended_cycles = 200;
  s.contended_sessions = 4;
  s.contended_cycles = 25;
  s.drain_waiters = {50, 200};
  s.drain_sessions = 5;
  s.pipelined_locks = 200;
  s.handoff_contenders = {2, 4};
  s.handoff_cycles = 20;
  s.fence_seconds = 0.2;
  s.detector_dirs = 4;
  s.detector_locks_per_dir = 50;
  s.detector_waiters = 40;
  s.detector_cycles = 2;
  s.restart_dirs = 2000;
  s.retakes = 2000;
  s.services_sessions = 20;
  s.services_waiters = 4;
  s.services_seconds = 2;
  // The platform: a tenth of everything, a 10 s window.
  auto& p = s.platform;
  p.owners = 1000;
  p.processes = 2;
  p.hot_locks = 2;
  p.hot_contenders = 50;
  p.hot_sessions = 4;
  p.warmup_s = 2;
  p.window_s = 10;
  p.alone_s = 3;
  p.floor_max = 4000;
  p.floor_warmup_s = 0.5;
  p.floor_step_s = 1.5;
  return s;
}

ClientOptions client_options(const Env& env) {
  ClientOptions o;
  o.connect = env.connect;
  o.session_timeout = kSessionTimeout;
  return o;  // resolution_delay stays at its 30 s default, like the floor
}

}  // namespace zklock::bench
