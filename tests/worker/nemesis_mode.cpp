// zklock_test_worker nemesis: one contender of the nemesis run
// (tests/faults/nemesis_test.cpp). It loops try_acquire_for → hold → release
// on one FairMutex, re-creates its Client when the session is gone, and
// reports every grant, release and validity interval on CLOCK_MONOTONIC (one
// clock for every process on the machine: the test compares instants of
// different contenders).
//
// Usage:
//   zklock_test_worker nemesis --connect HOSTS --lock PATH --name NAME [options]
//
//   --session-timeout MS   requested session timeout (default 4000)
//   --acquire-timeout MS   try_acquire_for's timeout (default 10000)
//   --hold-ms MS           time inside the critical section (default 150)
//   --retain-ms MS         MutexOptions::retain (default 0: a plain mutex)
//   --stderr FILE          append stderr (zklock's log lines) to FILE
//   --log-level LEVEL      spdlog level for zklock's log (default info)
//
// The owner of every acquisition is NAME. SIGTERM ends the loop after the
// current round: the lease is released, the mutex destroyed (which ends a
// retention), and "idle" is printed with the Client still open, so the test
// can check that no node outlived its attempt while every session is alive.
// SIGUSR1 then closes the Client and exits 0 ("exiting").
//
// Output on stdout, one line per event, "<event> k=v ... t=<us>":
//   client   n=K session=0x.. timeout=MS      a Client (re)created
//   client_failed msg=...                     its constructor threw (retried)
//   state    s=<connected|suspended|reconnected|lost> session=0x..
//   attempt  n=I
//   granted  n=I czxid=Z token=T node=NAME valid=0|1 session=0x..
//            t = the instant try_acquire_for returned (stamped after it)
//   released n=I czxid=Z samples=N first_valid=US last_valid=US first_invalid=US
//            revalid=0|1 rel_start=US      (US -1: no such sample)
//   timeout  n=I                              try_acquire_for gave up
//   acquire_error n=I code=<errc> msg=...
//   idle     session=0x..
//   exiting
//
// Validity samples: during the hold, valid() is called every 2 ms, each call
// stamped *before* it is made: a true sample at instant X proves the lease
// believed itself valid at some instant >= X. first_valid/first_invalid are
// the first true/false samples; last_valid is the last true sample of the
// whole hold (revalid=1 if a true sample followed a false one). The last
// sample is taken just before release (rel_start).
//
// Exit codes: 0 after SIGTERM + SIGUSR1; 2 usage.
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

#include "worker.hpp"
#include "zklock/client.hpp"
#include "zklock/error.hpp"
#include "zklock/fair_mutex.hpp"

namespace zklock::test_worker {
namespace {

using namespace std::chrono_literals;

std::atomic<bool> g_stop{false};  // SIGTERM: finish the round, go idle
std::atomic<bool> g_exit{false};  // SIGUSR1: close and exit

struct Args {
  std::string connect, lock, name, stderr_file, log_level = "info";
  int session_ms = 4000, acquire_ms = 10000, hold_ms = 150, retain_ms = 0;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "zklock_test_worker nemesis: %s (see tests/worker/nemesis_mode.cpp)\n", why.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) usage("missing value for " + k);
    const std::string v = argv[++i];
    try {
      if (k == "--connect") a.connect = v;
      else if (k == "--lock") a.lock = v;
      else if (k == "--name") a.name = v;
      else if (k == "--stderr") a.stderr_file = v;
      else if (k == "--log-level") a.log_level = v;
      else if (k == "--session-timeout") a.session_ms = std::stoi(v);
      else if (k == "--acquire-timeout") a.acquire_ms = std::stoi(v);
      else if (k == "--hold-ms") a.hold_ms = std::stoi(v);
      else if (k == "--retain-ms") a.retain_ms = std::stoi(v);
      else usage("unknown option " + k);
    } catch (const std::logic_error&) {
      usage("bad number for " + k + ": " + v);
    }
  }
  if (a.connect.empty() || a.lock.empty() || a.name.empty()) usage("--connect, --lock and --name are required");
  if (a.session_ms <= 0 || a.acquire_ms <= 0 || a.hold_ms < 0 || a.retain_ms < 0) usage("bad time");
  return a;
}

std::int64_t mono_us() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

std::string hex(std::int64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

// One event line stamped now (or at `t`, when the instant was taken earlier).
void event(const std::string& kind, const std::string& fields, std::int64_t t = -1) {
  std::string line = kind + (fields.empty() ? "" : " " + fields);
  for (auto& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  print_line(line + " t=" + std::to_string(t < 0 ? mono_us() : t));
}

// The Client and its mutex, re-created together when the session is gone.
// The listener only raises `lost`: the main thread does the re-creation
// (a Client must not be destroyed from its own callback).
struct Contender {
  std::unique_ptr<Client> client;
  std::unique_ptr<FairMutex> mutex;
  std::shared_ptr<std::atomic<bool>> lost = std::make_shared<std::atomic<bool>>(false);
};

bool connect(const Args& a, Contender& c, int n) {
  c.mutex.reset();
  c.client.reset();
  c.lost = std::make_shared<std::atomic<bool>>(false);
  try {
    ClientOptions o;
    o.connect = a.connect;
    o.session_timeout = std::chrono::milliseconds(a.session_ms);
    o.connect_timeout = 10s;
    o.owner_prefix = a.name;
    c.client = std::make_unique<Client>(o);
  } catch (const std::exception& e) {
    event("client_failed", std::string("msg=") + e.what());
    return false;
  }
  Client* raw = c.client.get();
  c.client->add_listener([raw, lost = c.lost](ConnectionState s) {
    if (s == ConnectionState::lost) *lost = true;
    event("state", "s=" + std::string(state_name(s)) + " session=" + hex(raw->session_id()));
  });
  c.mutex = std::make_unique<FairMutex>(*c.client, a.lock, MutexOptions{.retain = std::chrono::milliseconds(a.retain_ms)});
  event("client", "n=" + std::to_string(n) + " session=" + hex(c.client->session_id()) +
                      " timeout=" + std::to_string(c.client->negotiated_timeout().count()));
  return true;
}

// Holds `lease` for hold_ms, sampling valid() every 2 ms, then releases it.
void hold_and_release(const Args& a, int n, Lease& lease) {
  const auto czxid = lease.token().czxid();
  std::int64_t first_valid = -1, last_valid = -1, first_invalid = -1;
  bool revalid = false;
  int samples = 0;
  const std::int64_t until = mono_us() + static_cast<std::int64_t>(a.hold_ms) * 1000;
  while (true) {
    const std::int64_t at = mono_us();  // before the call: see the file comment
    const bool v = lease.valid();
    ++samples;
    if (v) {
      if (first_valid < 0) first_valid = at;
      if (first_invalid >= 0) revalid = true;
      last_valid = at;
    } else if (first_invalid < 0) {
      first_invalid = at;
    }
    if (at >= until) break;
    std::this_thread::sleep_for(2ms);
  }
  const std::int64_t rel_start = mono_us();
  lease.release();
  event("released", "n=" + std::to_string(n) + " czxid=" + std::to_string(czxid) +
                        " samples=" + std::to_string(samples) + " first_valid=" + std::to_string(first_valid) +
                        " last_valid=" + std::to_string(last_valid) + " first_invalid=" + std::to_string(first_invalid) +
                        " revalid=" + (revalid ? "1" : "0") + " rel_start=" + std::to_string(rel_start));
}

}  // namespace

int run_nemesis(int argc, char** argv) {
  const Args a = parse(argc, argv);
  if (!a.stderr_file.empty() && !std::freopen(a.stderr_file.c_str(), "a", stderr)) usage("cannot open " + a.stderr_file);
  spdlog::set_level(spdlog::level::from_str(a.log_level));
  spdlog::flush_on(spdlog::level::trace);  // a SIGKILL must not lose the last lines
  ::signal(SIGTERM, [](int) { g_stop = true; });
  ::signal(SIGUSR1, [](int) { g_exit = true; });

  Contender c;
  int clients = 0;
  for (int n = 0; !g_stop; ++n) {
    if (!c.client || *c.lost) {
      if (!connect(a, c, clients++)) {
        std::this_thread::sleep_for(200ms);
        continue;
      }
    }
    event("attempt", "n=" + std::to_string(n));
    std::optional<Lease> lease;
    try {
      lease = c.mutex->try_acquire_for(std::chrono::milliseconds(a.acquire_ms), {.owner = a.name});
    } catch (const Error& e) {
      event("acquire_error", "n=" + std::to_string(n) + " code=" + std::string(errc_name(e.code())) +
                                 " msg=" + e.what());
      std::this_thread::sleep_for(50ms);  // an expired session: the listener raises `lost`
      continue;
    }
    const std::int64_t granted_at = mono_us();  // after the return: see the file comment
    if (!lease) {
      event("timeout", "n=" + std::to_string(n), granted_at);
      continue;
    }
    event("granted", "n=" + std::to_string(n) + " czxid=" + std::to_string(lease->token().czxid()) +
                         " token=" + lease->token().str() + " node=" + lease->node_path() +
                         " valid=" + (lease->valid() ? "1" : "0") + " session=" + hex(c.client->session_id()),
          granted_at);
    hold_and_release(a, n, *lease);
  }
  c.mutex.reset();  // ends a retention: the idle node is deleted
  event("idle", "session=" + hex(c.client ? c.client->session_id() : 0));
  for (int i = 0; i < 6000 && !g_exit; ++i) std::this_thread::sleep_for(10ms);
  c.client.reset();
  event("exiting", "");
  return 0;
}

}  // namespace zklock::test_worker
