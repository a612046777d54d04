// `fence`: FenceGate::admit in memory, admits per CPU-second on 1 and 2 threads.
#include <time.h>

#include <atomic>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "scenarios.hpp"
#include "zklock/fence_gate.hpp"

namespace zklock::bench {
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
