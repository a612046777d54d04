#include "scenarios.hpp"

#include <time.h>

#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <thread>

#include "floor.hpp"
#include "zklock/client.hpp"
#include "zklock/fair_mutex.hpp"
#include "zklock/fence_gate.hpp"

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

namespace {

using std::chrono::milliseconds;

// Counts down to zero; waits are bounded.
class Latch {
 public:
  explicit Latch(std::int64_t n) : left_(n) {}
  void count_down() {
    std::lock_guard lk(mu_);
    if (--left_ <= 0) cv_.notify_all();
  }
  bool wait_for(milliseconds limit) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, limit, [&] { return left_ <= 0; });
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::int64_t left_;  // GUARDED_BY(mu_)
};

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// Long enough that the floor's listing storm while 5,000 waiters queue (each
// lists every node ahead of it) does not time connections out.
constexpr std::chrono::milliseconds kSessionTimeout{30'000};

ClientOptions client_options(const Env& env) {
  ClientOptions o;
  o.connect = env.connect;
  o.session_timeout = kSessionTimeout;
  return o;  // resolution_delay stays at its 30 s default, like the floor
}

// Persistent nodes, pipelined on one raw session. The context is leaked if
// the bounded wait runs out (a late completion must not touch freed memory).
void create_many(FloorSession& s, const std::vector<std::string>& paths) {
  struct Batch {
    explicit Batch(std::size_t n) : latch(static_cast<std::int64_t>(n)) {}
    Latch latch;
    std::atomic<int> bad{ZOK};
  };
  auto* batch = new Batch(paths.size());
  for (const auto& p : paths) {
    const int r = zoo_acreate(
        s.zh(), p.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, 0,
        [](int rc, const char*, const void* data) {
          auto* b = static_cast<Batch*>(const_cast<void*>(data));
          if (rc != ZOK && rc != ZNODEEXISTS) b->bad = rc;
          b->latch.count_down();
        },
        batch);
    if (r != ZOK) {
      batch->bad = r;
      batch->latch.count_down();
    }
  }
  if (!batch->latch.wait_for(milliseconds(300'000))) throw std::runtime_error("create_many: timed out");
  const int bad = batch->bad;
  delete batch;
  if (bad != ZOK) throw std::runtime_error(std::string("create_many: ") + zerror(bad));
}

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

}  // namespace

// --- uncontended -------------------------------------------------------------


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

// --- contended and hand-off --------------------------------------------------

namespace {

// One contender: a session and a lock, used by one thread.
class Contender {
 public:
  virtual ~Contender() = default;
  virtual void acquire() = 0;
  virtual void release() = 0;
};

class ZklockContender : public Contender {
 public:
  ZklockContender(const Env& env, const std::string& path) : client_(client_options(env)), mutex_(client_, path) {}
  void acquire() override { lease_.emplace(mutex_.acquire()); }
  void release() override {
    lease_->release();
    lease_.reset();
  }

 private:
  Client client_;
  FairMutex mutex_;
  std::optional<Lease> lease_;
};

class FloorContender : public Contender {
 public:
  FloorContender(const Env& env, const std::string& path) : session_(env.connect, kSessionTimeout), lock_(session_, path) {}
  void acquire() override { lock_.acquire(); }
  void release() override { lock_.release(); }

 private:
  FloorSession session_;
  FloorLock lock_;
};

struct ContendedResult {
  double acquisitions_per_s = 0;
  std::vector<double> wait_us, handoff_us;
  int violations = 0;
  Traffic traffic;
};

// k threads, one contender each, `cycles` acquire/release each. A hand-off
// is timed when the new holder asked before the previous release started
// (it was waiting): release start -> grant seen by the waiter.
ContendedResult run_contended(const Env& env, std::vector<std::unique_ptr<Contender>> contenders, int cycles) {
  ContendedResult r;
  const auto k = contenders.size();
  std::atomic<int> inside{0}, violations{0};
  std::atomic<std::int64_t> last_release{0};
  std::atomic<std::size_t> ready{0};
  std::atomic<bool> go{false};
  std::vector<std::vector<double>> waits(k), handoffs(k);
  std::vector<std::string> errors(k);
  std::vector<std::thread> threads;
  settle(env);
  const auto m0 = Traffic::from(env.mntr());
  for (std::size_t t = 0; t < k; ++t) {
    threads.emplace_back([&, t] {
      ++ready;
      while (!go.load()) std::this_thread::yield();
      try {
        for (int i = 0; i < cycles; ++i) {
          const auto tw = now_ns();
          contenders[t]->acquire();
          const auto tg = now_ns();
          if (inside.fetch_add(1) != 0) ++violations;
          const auto lr = last_release.load();
          if (lr > tw) handoffs[t].push_back(static_cast<double>(tg - lr) / 1e3);
          waits[t].push_back(static_cast<double>(tg - tw) / 1e3);
          inside.fetch_sub(1);
          last_release.store(now_ns());
          contenders[t]->release();
        }
      } catch (const std::exception& e) {
        errors[t] = e.what();
      }
    });
  }
  while (ready.load() < k) std::this_thread::yield();
  const auto start = Clock::now();
  go = true;
  for (auto& th : threads) th.join();
  const double secs = seconds(Clock::now() - start);
  r.traffic = Traffic::from(env.mntr()) - m0;
  for (auto& e : errors) {
    if (!e.empty()) throw std::runtime_error("contender failed: " + e);
  }
  for (std::size_t t = 0; t < k; ++t) {
    r.wait_us.insert(r.wait_us.end(), waits[t].begin(), waits[t].end());
    r.handoff_us.insert(r.handoff_us.end(), handoffs[t].begin(), handoffs[t].end());
  }
  r.acquisitions_per_s = static_cast<double>(k) * cycles / secs;
  r.violations = violations.load();
  return r;
}

std::pair<ContendedResult, ContendedResult> contended_pair(const Env& env, int k, int cycles,
                                                           const std::string& tag) {
  auto zk = [&] {
    const auto path = env.root + "/" + tag + "-zklock";
    {
      Client c(client_options(env));
      c.ensure_path(path, CreateMode::persistent);
    }
    std::vector<std::unique_ptr<Contender>> cs;
    for (int i = 0; i < k; ++i) cs.push_back(std::make_unique<ZklockContender>(env, path));
    return run_contended(env, std::move(cs), cycles);
  };
  auto fl = [&] {
    const auto path = env.root + "/" + tag + "-floor";
    {
      FloorSession s(env.connect, kSessionTimeout);
      s.ensure_path(path);
    }
    std::vector<std::unique_ptr<Contender>> cs;
    for (int i = 0; i < k; ++i) cs.push_back(std::make_unique<FloorContender>(env, path));
    return run_contended(env, std::move(cs), cycles);
  };
  if (env.run % 2 == 0) {
    auto z = zk();
    return {std::move(z), fl()};
  }
  auto f = fl();
  return {zk(), std::move(f)};
}

}  // namespace

Figures contended(const Env& env, const Sizes& s) {
  const auto [z, f] = contended_pair(env, s.contended_sessions, s.contended_cycles, "contended");
  const std::string sc = "contended (" + std::to_string(s.contended_sessions) + " sessions)";
  const double n = static_cast<double>(s.contended_sessions) * s.contended_cycles;
  return {
      {sc, "acquisitions/s", "1/s", z.acquisitions_per_s, f.acquisitions_per_s, Target::ratio_ge(1.0)},
      {sc, "wait p50", "us", percentile(z.wait_us, 50), percentile(f.wait_us, 50), {}},
      {sc, "wait p99", "us", percentile(z.wait_us, 99), percentile(f.wait_us, 99), {}},
      {sc, "requests/acquisition", "", z.traffic.packets_received / n, f.traffic.packets_received / n, {}},
      {sc, "bytes to client/acquisition", "B", z.traffic.bytes_to_clients() / n, f.traffic.bytes_to_clients() / n,
       {}},
      {sc, "exclusion violations", "", double(z.violations), double(f.violations), Target::value_le(0)},
  };
}

Figures handoff(const Env& env, const Sizes& s) {
  Figures out;
  for (int k : s.handoff_contenders) {
    const auto [z, f] = contended_pair(env, k, s.handoff_cycles, "handoff" + std::to_string(k));
    const std::string sc = "hand-off (" + std::to_string(k) + " contenders)";
    out.push_back({sc, "release->grant p50", "us", percentile(z.handoff_us, 50), percentile(f.handoff_us, 50), {}});
    out.push_back({sc, "release->grant p99", "us", percentile(z.handoff_us, 99), percentile(f.handoff_us, 99), {}});
    const double n = static_cast<double>(k) * s.handoff_cycles;
    out.push_back({sc, "requests/acquisition", "", z.traffic.packets_received / n, f.traffic.packets_received / n, {}});
    out.push_back({sc, "exclusion violations", "", double(z.violations), double(f.violations), Target::value_le(0)});
  }
  return out;
}

// --- drain ---------------------------------------------------------------------

namespace {

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

// --- pipelined -----------------------------------------------------------------

namespace {

struct PipeResult {
  double acquire_s = 0, total_s = 0, cpu = 0;
  Traffic traffic;
};

std::vector<std::string> lock_paths(const std::string& base, int n) {
  std::vector<std::string> v{base};
  for (int i = 0; i < n; ++i) v.push_back(base + "/l" + std::to_string(i));
  return v;
}

PipeResult pipe_zklock(const Env& env, int n) {
  const auto base = env.root + "/pipelined-zklock";
  auto paths = lock_paths(base, n);
  {
    FloorSession s(env.connect, kSessionTimeout);
    s.ensure_path(env.root);
    create_many(s, paths);
  }
  std::atomic<int> errors{0};
  Latch acquired(n), released(n);  // declared before the client: its callbacks use them
  Client client(client_options(env));
  client.ensemble_id();  // read once per session; not part of the figure
  std::vector<std::unique_ptr<FairMutex>> mutexes;
  for (int i = 0; i < n; ++i) mutexes.push_back(std::make_unique<FairMutex>(client, paths[std::size_t(i) + 1]));
  std::vector<Lease> leases(static_cast<std::size_t>(n));  // released before the client goes
  settle(env);
  PipeResult r;
  const auto m0 = Traffic::from(env.mntr());
  const double c0 = process_cpu_seconds();
  const auto start = Clock::now();
  for (int i = 0; i < n; ++i) {
    mutexes[std::size_t(i)]->acquire_async([&, i](AcquireResult a) {
      if (a.error) ++errors;
      else leases[std::size_t(i)] = std::move(a.lease);
      acquired.count_down();
    });
  }
  if (!acquired.wait_for(milliseconds(300'000))) throw std::runtime_error("zklock pipelined acquire timed out");
  r.acquire_s = seconds(Clock::now() - start);
  for (auto& l : leases) l.release_async([&] { released.count_down(); });
  if (!released.wait_for(milliseconds(300'000))) throw std::runtime_error("zklock pipelined release timed out");
  r.total_s = seconds(Clock::now() - start);
  r.cpu = process_cpu_seconds() - c0;
  r.traffic = Traffic::from(env.mntr()) - m0;
  if (errors) throw std::runtime_error("zklock pipelined: " + std::to_string(errors.load()) + " errors");
  return r;
}

PipeResult pipe_floor(const Env& env, int n) {
  const auto base = env.root + "/pipelined-floor";
  auto paths = lock_paths(base, n);
  std::vector<std::string> nodes(static_cast<std::size_t>(n));
  std::atomic<int> errors{0};
  Latch acquired(n), released(n);  // declared before the session: its callbacks use them
  FloorSession s(env.connect, kSessionTimeout);
  s.ensure_path(env.root);
  create_many(s, paths);
  settle(env);
  PipeResult r;
  const auto m0 = Traffic::from(env.mntr());
  const double c0 = process_cpu_seconds();
  const auto start = Clock::now();
  for (int i = 0; i < n; ++i) {
    floor_acquire_async(s, paths[std::size_t(i) + 1], [&, i](int rc, const std::string& node) {
      if (rc != ZOK) ++errors;
      nodes[std::size_t(i)] = node;
      acquired.count_down();
    });
  }
  if (!acquired.wait_for(milliseconds(300'000))) throw std::runtime_error("floor pipelined acquire timed out");
  r.acquire_s = seconds(Clock::now() - start);
  for (int i = 0; i < n; ++i) floor_release_async(s, nodes[std::size_t(i)], [&](int) { released.count_down(); });
  if (!released.wait_for(milliseconds(300'000))) throw std::runtime_error("floor pipelined release timed out");
  r.total_s = seconds(Clock::now() - start);
  r.cpu = process_cpu_seconds() - c0;
  r.traffic = Traffic::from(env.mntr()) - m0;
  if (errors) throw std::runtime_error("floor pipelined: " + std::to_string(errors.load()) + " errors");
  return r;
}

}  // namespace

Figures pipelined(const Env& env, const Sizes& s) {
  const int n = s.pipelined_locks;
  PipeResult z, f;
  if (env.run % 2 == 0) {
    z = pipe_zklock(env, n);
    f = pipe_floor(env, n);
  } else {
    f = pipe_floor(env, n);
    z = pipe_zklock(env, n);
  }
  const std::string sc = "pipelined (" + std::to_string(n) + " locks, 1 session)";
  const double dn = n;
  return {
      {sc, "acquisitions/s", "1/s", dn / z.acquire_s, dn / f.acquire_s, Target::ratio_ge(0.9)},
      {sc, "acquire+release/s", "1/s", dn / z.total_s, dn / f.total_s, {}},
      {sc, "requests/lock", "", z.traffic.packets_received / dn, f.traffic.packets_received / dn, {}},
      {sc, "bytes to client/lock", "B", z.traffic.bytes_to_clients() / dn, f.traffic.bytes_to_clients() / dn, {}},
      {sc, "client CPU/lock", "us", z.cpu * 1e6 / dn, f.cpu * 1e6 / dn, {}},
  };
}

// --- raw operation costs -------------------------------------------------------

// What zklock's steps cost on the raw C API, next to the textbook step they
// replace (same session, same server, no library): explains the cycle figures.
Figures op_costs(const Env& env, const Sizes& s) {
  const int n = std::max(50, s.uncontended_cycles / 5);
  FloorSession fs(env.connect, kSessionTimeout);
  const auto path = env.root + "/ops";
  fs.ensure_path(path);
  zhandle_t* zh = fs.zh();
  const std::string short_prefix = path + "/lock-";
  const std::string long_prefix = path + "/" + std::string("w_0123456789abcdef_0123456789abcdef0123456789abcdef_");
  const std::string data(150, 'x');
  std::vector<double> c_short, c_long, del, multi, seq_cl, pipe_cl, exists_us;
  char buf[512];
  auto timed = [](auto&& fn) {
    const auto t0 = Clock::now();
    fn();
    return micros(Clock::now() - t0);
  };
  auto check = [](int rc, const char* what) {
    if (rc != ZOK) throw std::runtime_error(std::string("op costs: ") + what + ": " + zerror(rc));
  };
  for (int i = 0; i < n; ++i) {
    c_short.push_back(timed([&] {
      check(zoo_create(zh, short_prefix.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL | ZOO_SEQUENCE, buf,
                       sizeof buf), "create");
    }));
    const std::string a = buf;
    exists_us.push_back(timed([&] { check(zoo_exists(zh, a.c_str(), 0, nullptr), "exists"); }));
    del.push_back(timed([&] { check(zoo_delete(zh, a.c_str(), -1), "delete"); }));
    c_long.push_back(timed([&] {
      check(zoo_create(zh, long_prefix.c_str(), data.data(), int(data.size()), &ZOO_OPEN_ACL_UNSAFE,
                       ZOO_EPHEMERAL | ZOO_SEQUENCE, buf, sizeof buf), "create");
    }));
    const std::string b = buf;
    multi.push_back(timed([&] {
      zoo_op_t ops[2];
      zoo_op_result_t results[2];
      const std::string name = b.substr(b.rfind('/') + 1);
      zoo_delete_op_init(&ops[0], b.c_str(), -1);
      zoo_set_op_init(&ops[1], path.c_str(), name.data(), int(name.size()), -1, nullptr);
      check(zoo_multi(zh, 2, ops, results), "multi");
    }));
    std::string c;
    seq_cl.push_back(timed([&] {
      check(zoo_create(zh, short_prefix.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL | ZOO_SEQUENCE, buf,
                       sizeof buf), "create");
      String_vector kids{};
      check(zoo_get_children(zh, path.c_str(), 0, &kids), "get children");
      deallocate_String_vector(&kids);
    }));
    c = buf;
    check(zoo_delete(zh, c.c_str(), -1), "delete");
    pipe_cl.push_back(timed([&] {
      // Heap contexts, freed only once both answers are in (a timeout leaks
      // them rather than leave the C client a dangling pointer).
      auto* both = new Latch(2);
      auto* ctx = new std::pair<Latch*, std::string*>(both, &c);
      check(zoo_acreate(zh, short_prefix.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL | ZOO_SEQUENCE,
                        [](int, const char* v, const void* d) {
                          auto* p = static_cast<std::pair<Latch*, std::string*>*>(const_cast<void*>(d));
                          if (v) *p->second = v;
                          p->first->count_down();
                        },
                        ctx), "acreate");
      check(zoo_aget_children(zh, path.c_str(), 0,
                              [](int, const String_vector*, const void* d) {
                                static_cast<Latch*>(const_cast<void*>(d))->count_down();
                              },
                              both), "aget_children");
      if (!both->wait_for(milliseconds(30'000))) throw std::runtime_error("op costs: pipelined pair timed out");
      delete ctx;
      delete both;
    }));
    check(zoo_delete(zh, c.c_str(), -1), "delete");
  }
  const std::string sc = "raw C-API op costs (floor column: textbook step)";
  return {
      {sc, "create p50: zklock name+data | short", "us", percentile(c_long, 50), percentile(c_short, 50), {}},
      {sc, "release p50: multi(delete+marker) | delete", "us", percentile(multi, 50), percentile(del, 50), {}},
      {sc, "create+list p50: pipelined | sequential", "us", percentile(pipe_cl, 50), percentile(seq_cl, 50), {}},
      {sc, "exists p50 (a read round trip)", "us", percentile(exists_us, 50), kNone, {}},
  };
}

// --- FenceGate -----------------------------------------------------------------

namespace {

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
}

// Admits per CPU-second with `threads` threads on one in-memory gate. Each
// thread cycles over its own 1,000 resources; a resource's token rises every
// 64 rounds (mostly repeat writes by the holder, as in a real service).
double admits_per_core_second(int threads, double wall_seconds) {
  FenceGate gate;
  const std::string ensemble = "7b1c3f9e-2d4a-4e8b-9c1d-0a2b3c4d5e6f";
  std::atomic<std::uint64_t> admits{0}, rejected{0};
  std::atomic<double> cpu{0};
  std::vector<std::thread> ts;
  for (int t = 0; t < threads; ++t) {
    ts.emplace_back([&, t] {
      std::vector<std::string> resources;
      for (int i = 0; i < 1000; ++i) resources.push_back("t" + std::to_string(t) + "/resource-" + std::to_string(i));
      const double c0 = thread_cpu_seconds();
      const auto end = Clock::now() + std::chrono::duration<double>(wall_seconds);
      std::uint64_t i = 0, bad = 0;
      FencingToken token(ensemble, 1);
      while ((i & 1023) != 0 || Clock::now() < end) {
        const auto round = i / 1000;
        if (i % 1000 == 0 && round % 64 == 0) token = FencingToken(ensemble, static_cast<std::int64_t>(round / 64 + 1));
        if (!gate.admit(resources[i % 1000], token)) ++bad;
        ++i;
      }
      double prev = cpu.load();
      while (!cpu.compare_exchange_weak(prev, prev + thread_cpu_seconds() - c0)) {
      }
      admits += i;
      rejected += bad;
    });
  }
  for (auto& th : ts) th.join();
  if (rejected) throw std::runtime_error("fence gate rejected a valid token");
  return static_cast<double>(admits.load()) / cpu.load();
}

}  // namespace

Figures fence_gate(const Env&, const Sizes& s) {
  const std::string sc = "FenceGate (in memory)";
  return {
      {sc, "admits/s per core, 1 thread", "1/s", admits_per_core_second(1, s.fence_seconds), kNone, {}},
      {sc, "admits/s per core, 2 threads", "1/s", admits_per_core_second(2, s.fence_seconds), kNone, {}},
  };
}

}  // namespace zklock::bench
