// `pipelined`: one session acquiring many locks at once (acquire_async), then
// releasing them all, against the floor's pipelined recipe.
#include <atomic>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "floor.hpp"
#include "scenario_support.hpp"
#include "scenarios.hpp"
#include "zklock/fair_mutex.hpp"

namespace zklock::bench {
namespace {

using std::chrono::milliseconds;

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

}  // namespace zklock::bench
