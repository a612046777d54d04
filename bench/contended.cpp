// `contended` and `handoff`: k sessions, one thread each, taking turns on one
// lock; both scenarios run the same contenders (run_contended), contended
// for throughput and wait, handoff for release -> grant.
#include <atomic>
#include <memory>
#include <optional>
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

std::int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

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

}  // namespace zklock::bench
