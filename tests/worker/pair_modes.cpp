// zklock_test_worker multi|naive|stripes: MultiLock and StripedMutex across
// processes, for lock_contract_test.cpp.
//
//   zklock_test_worker multi <connect> <go node> <iterations> <path>...
//       Connects, prints "ready", waits for <go node> to exist (a watch,
//       bounded), then takes MultiLock{<path>... exclusive} and releases it
//       <iterations> times. Prints "done <iterations> <ms>".
//   zklock_test_worker naive <connect> <go node> <iterations> <first> <second>
//       The control: the same rounds without MultiLock — FairMutex <first>,
//       then <second> with a 1 s limit. Prints "stalled <round>" and stops
//       at the first round where <second> was not granted in time (with a
//       peer taking them in the opposite order: a deadlock), else "done".
//   zklock_test_worker stripes <connect> <base> <stripes> <count>
//       Prints "<i> <stripe path>" for key "key-<i>", i in [0, count), as
//       StripedMutex::for_key sees it, then "done".
//
// Exit codes: 0 done (stalled included); 1 any error, after "error <what>";
// 2 usage.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <future>
#include <mutex>
#include <string>
#include <vector>

#include "worker.hpp"
#include "zklock/client.hpp"
#include "zklock/multi_lock.hpp"
#include "zklock/striped_mutex.hpp"

namespace zklock::test_worker {
namespace {

using namespace std::chrono_literals;

// Prints "ready", then waits (bounded) for `go` to exist.
bool wait_for_go(zklock::Client& client, const std::string& go) {
  print_line("ready");
  auto appeared = std::make_shared<std::promise<void>>();
  auto once = std::make_shared<std::once_flag>();
  auto fire = [appeared, once] { std::call_once(*once, [&] { appeared->set_value(); }); };
  client.stat_async(go, [fire](const zklock::WatchEvent&) { fire(); },
                    [fire](zklock::Status st, const zklock::Stat&) {
                      if (st.ok()) fire();
                    });
  if (appeared->get_future().wait_for(30s) != std::future_status::ready) {
    print_line("error no go node");
    return false;
  }
  return true;
}

// argv: multi <connect> <go> <iterations> <path>...
int run_multi(int argc, char** argv) {
  if (argc < 5) return 2;
  zklock::Client client({.connect = argv[1], .session_timeout = 4s});
  const int iterations = std::atoi(argv[3]);
  std::vector<zklock::LockSpec> specs;
  for (int i = 4; i < argc; ++i) specs.push_back({argv[i], zklock::Mode::exclusive});
  zklock::MultiLock multi(client, specs);
  if (!wait_for_go(client, argv[2])) return 1;
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) {
    zklock::MultiLease held = multi.acquire({.owner = "multi-worker"});
    held.release();
  }
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
  print_line("done " + std::to_string(iterations) + " " + std::to_string(ms.count()));
  return 0;
}

// argv: naive <connect> <go> <iterations> <first> <second>
int run_naive(int argc, char** argv) {
  if (argc != 6) return 2;
  zklock::Client client({.connect = argv[1], .session_timeout = 4s});
  const int iterations = std::atoi(argv[3]);
  zklock::FairMutex first(client, argv[4]), second(client, argv[5]);
  if (!wait_for_go(client, argv[2])) return 1;
  for (int i = 0; i < iterations; ++i) {
    zklock::Lease a = first.acquire({.owner = "naive-worker"});
    auto b = second.try_acquire_for(1s, {.owner = "naive-worker"});
    if (!b) {
      print_line("stalled " + std::to_string(i));
      return 0;
    }
  }
  print_line("done " + std::to_string(iterations));
  return 0;
}

// argv: stripes <connect> <base> <stripes> <count>
int run_stripes(int argc, char** argv) {
  if (argc != 5) return 2;
  zklock::Client client({.connect = argv[1], .session_timeout = 4s});
  zklock::StripedMutex striped(client, argv[2], static_cast<std::size_t>(std::atoll(argv[3])));
  const int count = std::atoi(argv[4]);
  for (int i = 0; i < count; ++i) {
    print_line(std::to_string(i) + " " + striped.for_key("key-" + std::to_string(i)).path());
  }
  print_line("done");
  return 0;
}

}  // namespace

int run_pair_mode(int argc, char** argv) {
  try {
    const std::string mode = argv[0];
    int rc = 2;
    if (mode == "multi") rc = run_multi(argc, argv);
    if (mode == "naive") rc = run_naive(argc, argv);
    if (mode == "stripes") rc = run_stripes(argc, argv);
    if (rc == 2) std::fprintf(stderr, "usage: see tests/worker/pair_modes.cpp\n");
    return rc;
  } catch (const std::exception& e) {
    print_line(std::string("error ") + e.what());
    return 1;
  }
}

}  // namespace zklock::test_worker
