// `uncontended`: one session acquiring and releasing one lock, zklock and the
// floor interleaved in blocks by interleaved_cycles (scenarios.hpp).
#include <algorithm>
#include <optional>
#include <string>
#include <utility>

#include "floor.hpp"
#include "scenario_support.hpp"
#include "scenarios.hpp"
#include "zklock/fair_mutex.hpp"

namespace zklock::bench {

// Runs `n` cycles of each side in alternating blocks of `block`, so both
// sides see the same background load (this machine is shared and its load
// drifts within seconds). Each block is bracketed by mntr and getrusage, so
// traffic and CPU are attributed to the side that ran it.
std::pair<CycleSide, CycleSide> interleaved_cycles(const Env& env, int n, const CycleFns& a, const CycleFns& b,
                                                   int block) {
  for (int i = 0; i < std::min(50, n / 10 + 1); ++i) {  // warm-up, not counted
    a.acquire();
    a.release();
    b.acquire();
    b.release();
  }
  settle(env);
  std::pair<CycleSide, CycleSide> out;
  auto run_block = [&](const CycleFns& fns, CycleSide& side, int count) {
    const auto m0 = Traffic::from(env.mntr());
    const double c0 = process_cpu_seconds();
    const double s0 = process_context_switches();
    const auto start = Clock::now();
    for (int i = 0; i < count; ++i) {
      const auto t0 = Clock::now();
      fns.acquire();
      const auto t1 = Clock::now();
      fns.release();
      const auto t2 = Clock::now();
      side.acquire_us.push_back(micros(t1 - t0));
      side.release_us.push_back(micros(t2 - t1));
      side.cycle_us.push_back(micros(t2 - t0));
    }
    side.seconds += seconds(Clock::now() - start);
    side.cpu += process_cpu_seconds() - c0;
    side.switches += process_context_switches() - s0;
    const auto d = Traffic::from(env.mntr()) - m0;
    side.traffic.packets_received += d.packets_received;
    side.traffic.packets_sent += d.packets_sent;
    side.traffic.response_bytes += d.response_bytes;
    side.traffic.watch_bytes += d.watch_bytes;
  };
  for (int done = 0, k = 0; done < n; done += block, ++k) {
    const int count = std::min(block, n - done);
    if ((k + env.run) % 2 == 0) {
      run_block(a, out.first, count);
      run_block(b, out.second, count);
    } else {
      run_block(b, out.second, count);
      run_block(a, out.first, count);
    }
  }
  return out;
}

Figures uncontended(const Env& env, const Sizes& s) {
  const int n = s.uncontended_cycles;
  Client client(client_options(env));
  const auto zpath = env.root + "/uncontended-zklock";
  client.ensure_path(zpath, CreateMode::persistent);
  FairMutex mutex(client, zpath);
  std::optional<Lease> lease;
  FloorSession session(env.connect, kSessionTimeout);
  const auto fpath = env.root + "/uncontended-floor";
  session.ensure_path(fpath);
  FloorLock lock(session, fpath);
  const auto [z, f] = interleaved_cycles(
      env, n,
      {[&] { lease.emplace(mutex.acquire()); },
       [&] {
         lease->release();
         lease.reset();
       }},
      {[&] { lock.acquire(); }, [&] { lock.release(); }});
  const double dn = n;
  const std::string sc = "uncontended";
  return {
      {sc, "cycle p50", "us", percentile(z.cycle_us, 50), percentile(f.cycle_us, 50), Target::ratio_le(0.8)},
      {sc, "cycle p99", "us", percentile(z.cycle_us, 99), percentile(f.cycle_us, 99), Target::ratio_le(1.5)},
      {sc, "acquire p50", "us", percentile(z.acquire_us, 50), percentile(f.acquire_us, 50), {}},
      {sc, "release p50", "us", percentile(z.release_us, 50), percentile(f.release_us, 50), {}},
      {sc, "cycles/s", "1/s", dn / z.seconds, dn / f.seconds, {}},
      {sc, "requests/cycle", "", z.traffic.packets_received / dn, f.traffic.packets_received / dn, {}},
      {sc, "packets/cycle", "", z.traffic.packets() / dn, f.traffic.packets() / dn, {}},
      {sc, "bytes to client/cycle", "B", z.traffic.bytes_to_clients() / dn, f.traffic.bytes_to_clients() / dn, {}},
      {sc, "client CPU/cycle", "us", z.cpu * 1e6 / dn, f.cpu * 1e6 / dn, Target::ratio_le(1.2)},
      {sc, "context switches/cycle", "", z.switches / dn, f.switches / dn, {}},
  };
}

}  // namespace zklock::bench
