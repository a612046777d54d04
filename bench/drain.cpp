// `drain`: N waiters queued behind one holder on a few sessions, then the
// holder's release, timed until every waiter was granted and released.
#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "floor.hpp"
#include "scenario_support.hpp"
#include "scenarios.hpp"
#include "zklock/fair_mutex.hpp"

namespace zklock::bench {
namespace {

using std::chrono::milliseconds;

// Polls until `path` has `expected()` children (bounded). `expected` may
// shrink while waiting (enqueues that failed).
void wait_children(FloorSession& s, const std::string& path, const std::function<int()>& expected,
                   milliseconds limit) {
  const auto deadline = Clock::now() + limit;
  for (;;) {
    ::Stat st{};
    if (zoo_exists(s.zh(), path.c_str(), 0, &st) == ZOK && st.numChildren >= expected()) return;
    if (Clock::now() > deadline) {
      throw std::runtime_error(path + ": " + std::to_string(st.numChildren) + " of " + std::to_string(expected()) +
                               " children after the limit");
    }
    std::this_thread::sleep_for(milliseconds(20));
  }
}


struct DrainResult {
  int grants = 0;
  double seconds = 0;  // draining, from the holder's release to the last grant
  Traffic traffic;
  int errors = 0, violations = 0;
  double cpu = 0;  // client CPU while draining (every session of the side)
  std::vector<double> gaps_us;  // between consecutive grants: where a slow drain spends its time
};

// Grant times of one drain, appended from the callbacks.
class GrantClock {
 public:
  explicit GrantClock(int n) { times_.reserve(static_cast<std::size_t>(n)); }
  void mark() {
    std::lock_guard lk(mu_);
    times_.push_back(Clock::now());
  }
  std::vector<double> gaps_us() {
    std::lock_guard lk(mu_);
    std::vector<double> g;
    for (std::size_t i = 1; i < times_.size(); ++i) g.push_back(micros(times_[i] - times_[i - 1]));
    return g;
  }

 private:
  std::mutex mu_;
  std::vector<Clock::time_point> times_;  // GUARDED_BY(mu_)
};

// What both sides of a drain share: the counters their callbacks update, and
// the timed part, from the holder's release until every waiter was granted.
struct DrainRun {
  explicit DrainRun(int n) : n(n), latch(n), grants(n) {}

  // A waiter was granted: note when, and whether anyone else was inside.
  void granted() {
    grants.mark();
    if (inside.fetch_add(1) != 0) ++violations;
    inside.fetch_sub(1);
  }

  DrainResult time(const Env& env, const std::function<void()>& release_holder, const std::string& side) {
    settle(env);
    DrainResult r;
    const auto m0 = Traffic::from(env.mntr());
    const double c0 = process_cpu_seconds();
    const auto start = Clock::now();
    release_holder();
    if (!latch.wait_for(milliseconds(600'000))) throw std::runtime_error(side + " drain did not finish");
    r.grants = n;
    r.seconds = seconds(Clock::now() - start);
    r.cpu = process_cpu_seconds() - c0;
    r.traffic = Traffic::from(env.mntr()) - m0;
    r.errors = errors;
    r.violations = violations;
    r.gaps_us = grants.gaps_us();
    return r;
  }

  const int n;
  Latch latch;  // counted down once per waiter: granted and released, or failed
  GrantClock grants;
  std::atomic<int> errors{0}, inside{0}, violations{0};
};

DrainResult drain_zklock(const Env& env, int n, int sessions, int rep) {
  const auto path = env.root + "/drain" + std::to_string(n) + "-" + std::to_string(rep) + "-zklock";
  // Declared first: pending callbacks (run with Errc::closing when a Client
  // is destroyed on an error path) must find it alive.
  DrainRun run(n);
  Client holder_client(client_options(env));
  holder_client.ensure_path(path, CreateMode::persistent);
  FairMutex holder_mutex(holder_client, path);
  auto holder = holder_mutex.acquire(AcquireOptions{"drain-holder", 0, {}});
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::unique_ptr<FairMutex>> mutexes;
  for (int i = 0; i < sessions; ++i) {
    clients.push_back(std::make_unique<Client>(client_options(env)));
    mutexes.push_back(std::make_unique<FairMutex>(*clients.back(), path));
  }
  for (int i = 0; i < n; ++i) {
    AcquireOptions o;
    o.owner = "drain-waiter-" + std::to_string(i);
    mutexes[static_cast<std::size_t>(i % sessions)]->acquire_async(
        [&](AcquireResult r) {
          if (r.error) {
            ++run.errors;
          } else {
            run.granted();
            r.lease.release();
          }
          run.latch.count_down();
        },
        o);
  }
  FloorSession probe(env.connect, kSessionTimeout);
  wait_children(probe, path, [&] { return n + 1 - run.errors.load(); }, milliseconds(300'000));
  return run.time(env, [&] { holder.release(); }, "zklock");
}

DrainResult drain_floor(const Env& env, int n, int sessions, int rep) {
  const auto path = env.root + "/drain" + std::to_string(n) + "-" + std::to_string(rep) + "-floor";
  DrainRun run(n);  // declared before the sessions: their callbacks use it
  FloorSession holder_session(env.connect, kSessionTimeout);
  holder_session.ensure_path(path);
  FloorLock holder(holder_session, path);
  holder.acquire();
  std::vector<std::unique_ptr<FloorSession>> ss;
  for (int i = 0; i < sessions; ++i) ss.push_back(std::make_unique<FloorSession>(env.connect, kSessionTimeout));
  for (int i = 0; i < n; ++i) {
    FloorSession* s = ss[static_cast<std::size_t>(i % sessions)].get();
    floor_acquire_async(*s, path, [&, s](int rc, const std::string& node) {
      if (rc != ZOK) {
        ++run.errors;
        run.latch.count_down();
        return;
      }
      run.granted();
      floor_release_async(*s, node, [&](int) { run.latch.count_down(); });
    });
  }
  wait_children(holder_session, path, [&] { return n + 1 - run.errors.load(); }, milliseconds(300'000));
  return run.time(env, [&] { holder.release(); }, "floor");
}

void add(DrainResult& sum, DrainResult one) {
  sum.grants += one.grants;
  sum.seconds += one.seconds;
  sum.traffic.packets_received += one.traffic.packets_received;
  sum.traffic.packets_sent += one.traffic.packets_sent;
  sum.traffic.response_bytes += one.traffic.response_bytes;
  sum.traffic.watch_bytes += one.traffic.watch_bytes;
  sum.errors += one.errors;
  sum.violations += one.violations;
  sum.cpu += one.cpu;
  sum.gaps_us.insert(sum.gaps_us.end(), one.gaps_us.begin(), one.gaps_us.end());
}

// A small queue drains in a few tens of milliseconds, too short a window for
// a rate on a shared machine: it is queued and drained again until at least
// this many grants were timed (per side and run; not in --quick).
constexpr int kMinTimedGrants = 1000;

}  // namespace

Figures drain(const Env& env, const Sizes& s) {
  Figures out;
  std::vector<std::pair<DrainResult, DrainResult>> results;
  for (int n : s.drain_waiters) {
    const int reps = env.quick ? 1 : std::max(1, kMinTimedGrants / n);
    env.log("drain N=" + std::to_string(n) + (reps > 1 ? " (" + std::to_string(reps) + " times)" : ""));
    DrainResult z, f;
    for (int rep = 0; rep < reps; ++rep) {
      if ((env.run + rep) % 2 == 0) {
        add(z, drain_zklock(env, n, s.drain_sessions, rep));
        add(f, drain_floor(env, n, s.drain_sessions, rep));
      } else {
        add(f, drain_floor(env, n, s.drain_sessions, rep));
        add(z, drain_zklock(env, n, s.drain_sessions, rep));
      }
    }
    const std::string sc = "drain (N=" + std::to_string(n) + ")";
    const double dn = z.grants;
    const double fn = f.grants;
    out.push_back({sc, "acquisitions/s", "1/s", z.grants / z.seconds, f.grants / f.seconds, {}});
    out.push_back({sc, "bytes to client/acquisition", "B", z.traffic.bytes_to_clients() / dn,
                   f.traffic.bytes_to_clients() / fn, {}});
    out.push_back({sc, "requests/acquisition", "", z.traffic.packets_received / dn, f.traffic.packets_received / fn,
                   {}});
    out.push_back({sc, "client CPU/acquisition", "us", z.cpu * 1e6 / dn, f.cpu * 1e6 / fn, {}});
    out.push_back({sc, "grant gap p50", "us", percentile(z.gaps_us, 50), percentile(f.gaps_us, 50), {}});
    out.push_back({sc, "grant gap p99", "us", percentile(z.gaps_us, 99), percentile(f.gaps_us, 99), {}});
    out.push_back({sc, "grant gap max", "us", percentile(z.gaps_us, 100), percentile(f.gaps_us, 100), {}});
    out.push_back({sc, "errors + violations", "", double(z.errors + z.violations), double(f.errors + f.violations),
                   Target::value_le(0)});
    results.emplace_back(z, f);
  }
  if (results.size() >= 2) {
    const auto& [z0, f0] = results.front();
    const auto& [z1, f1] = results.back();
    const std::string sc = "drain scaling (N=" + std::to_string(s.drain_waiters.back()) + " vs " +
                           std::to_string(s.drain_waiters.front()) + ")";
    auto rate = [](const DrainResult& r) { return r.grants / r.seconds; };
    auto bytes = [](const DrainResult& r) { return static_cast<double>(r.traffic.bytes_to_clients()) / r.grants; };
    out.push_back({sc, "rate ratio", "x", rate(z1) / rate(z0), rate(f1) / rate(f0), Target::value_ge(0.9)});
    out.push_back({sc, "bytes/acquisition ratio", "x", bytes(z1) / bytes(z0), bytes(f1) / bytes(f0),
                   Target::value_le(1.1)});
  }
  return out;
}

}  // namespace zklock::bench
