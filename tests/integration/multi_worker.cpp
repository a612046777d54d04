// zklock_multi_worker — a separate process for lock_contract_test.cpp.
//
//   zklock_multi_worker multi <connect> <go node> <iterations> <path>...
//       Connects, prints "ready", waits for <go node> to exist (a watch,
//       bounded), then takes MultiLock{<path>... exclusive} and releases it
//       <iterations> times. Prints "done <iterations> <ms>".
//   zklock_multi_worker naive <connect> <go node> <iterations> <first> <second>
//       The control: the same rounds without MultiLock — FairMutex <first>,
//       then <second> with a 1 s limit. Prints "stalled <round>" and stops
//       at the first round where <second> was not granted in time (with a
//       peer taking them in the opposite order: a deadlock), else "done".
//   zklock_multi_worker stripes <connect> <base> <stripes> <count>
//       Prints "<i> <stripe path>" for key "key-<i>", i in [0, count), as
//       StripedMutex::for_key sees it, then "done".
//
// Any error: "error <what>" and exit 1.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <string>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "zklock/client.hpp"
#include "zklock/multi_lock.hpp"
#include "zklock/striped_mutex.hpp"

namespace {

using namespace std::chrono_literals;

// Prints "ready", then waits (bounded) for `go` to exist.
bool wait_for_go(zklock::Client& client, const std::string& go) {
  std::printf("ready\n");
  std::fflush(stdout);
  auto appeared = std::make_shared<std::promise<void>>();
  auto once = std::make_shared<std::once_flag>();
  auto fire = [appeared, once] { std::call_once(*once, [&] { appeared->set_value(); }); };
  client.stat_async(go, [fire](const zklock::WatchEvent&) { fire(); },
                    [fire](zklock::Status st, const zklock::Stat&) {
                      if (st.ok()) fire();
                    });
  if (appeared->get_future().wait_for(30s) != std::future_status::ready) {
    std::printf("error no go node\n");
    return false;
  }
  return true;
}

int run_multi(int argc, char** argv) {
  if (argc < 6) return 2;
  zklock::Client client({.connect = argv[2], .session_timeout = 4s});
  const int iterations = std::atoi(argv[4]);
  std::vector<zklock::LockSpec> specs;
  for (int i = 5; i < argc; ++i) specs.push_back({argv[i], zklock::Mode::exclusive});
  zklock::MultiLock multi(client, specs);
  if (!wait_for_go(client, argv[3])) return 1;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) {
    zklock::MultiLease held = multi.acquire({.owner = "multi-worker"});
    held.release();
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  std::printf("done %d %lld\n", iterations, static_cast<long long>(ms.count()));
  return 0;
}

int run_naive(int argc, char** argv) {
  if (argc != 7) return 2;
  zklock::Client client({.connect = argv[2], .session_timeout = 4s});
  const int iterations = std::atoi(argv[4]);
  zklock::FairMutex first(client, argv[5]), second(client, argv[6]);
  if (!wait_for_go(client, argv[3])) return 1;
  for (int i = 0; i < iterations; ++i) {
    zklock::Lease a = first.acquire({.owner = "naive-worker"});
    auto b = second.try_acquire_for(1s, {.owner = "naive-worker"});
    if (!b) {
      std::printf("stalled %d\n", i);
      return 0;
    }
  }
  std::printf("done %d\n", iterations);
  return 0;
}

int run_stripes(int argc, char** argv) {
  if (argc != 6) return 2;
  zklock::Client client({.connect = argv[2], .session_timeout = 4s});
  zklock::StripedMutex striped(client, argv[3], static_cast<std::size_t>(std::atoll(argv[4])));
  const int count = std::atoi(argv[5]);
  for (int i = 0; i < count; ++i) {
    std::printf("%d %s\n", i, striped.for_key("key-" + std::to_string(i)).path().c_str());
  }
  std::printf("done\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    // stdout carries the answers: logs go to stderr.
    spdlog::set_default_logger(spdlog::stderr_color_mt("worker"));
    spdlog::set_level(spdlog::level::warn);
    const std::string mode = argc > 1 ? argv[1] : "";
    int rc = 2;
    if (mode == "multi") rc = run_multi(argc, argv);
    if (mode == "naive") rc = run_naive(argc, argv);
    if (mode == "stripes") rc = run_stripes(argc, argv);
    if (rc == 2) std::fprintf(stderr, "usage: see tests/integration/multi_worker.cpp\n");
    std::fflush(stdout);
    return rc;
  } catch (const std::exception& e) {
    std::printf("error %s\n", e.what());
    std::fflush(stdout);
    return 1;
  }
}
