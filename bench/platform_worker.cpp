// The worker processes of the `platform` scenario (platform.cpp starts them
// as `zklock-bench platform-worker ...`). One worker is one process with its
// own Clients, in one of two roles:
//
//   owners  one Client; `--owners` owners, each with its own retained lock
//           taken and released `--rate` times a second, plus `--held` locks
//           held for the worker's whole life. Driven by `--threads` threads
//           on a 1 ms tick: an owner's operation starts within 1 ms of its
//           slot, slots spread evenly over the period.
//   hot     `--sessions` Clients; `--locks` lock paths with `--contenders`
//           contenders each, every holder working `--work-ms` in the lock,
//           all driven by acquire_async and one timer thread (no thread per
//           contender, no retention: every grant is a hand-off).
//
// Protocol (lines): the worker builds its state and prints "ready"; then it
// reads commands on stdin and answers each on stdout:
//   queue          (hot) every contender queues; answers "queued"
//   window S M E   run from steady-clock time S (ns) to E, measuring from M;
//                  answers "result {json}"
//   quit (or EOF)  releases everything, answers "bye", exits 0
// steady_clock is CLOCK_MONOTONIC, one clock for every process of the machine,
// so the coordinator and all workers measure the same interval.
#include <atomic>
#include <condition_variable>
#include <iostream>
#include <mutex>
#include <queue>
#include <sstream>
#include <thread>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "histogram.hpp"
#include "measure.hpp"
#include "platform.hpp"
#include "zklock/fair_mutex.hpp"

namespace zklock::bench {
namespace {

using namespace std::chrono_literals;
using nlohmann::json;

Clock::time_point from_ns(std::int64_t ns) { return Clock::time_point(std::chrono::nanoseconds(ns)); }

}  // namespace

json count_diff(const json& a, const json& b) {
  json d;
  for (auto& [k, v] : b.items()) d[k] = v.get<std::int64_t>() - a[k].get<std::int64_t>();
  return d;
}

namespace {

struct Args {
  std::string role, connect, root;
  int index = 0, owners = 1000, held = 4, rate = 10, threads = 2, retain_ms = 2000;
  int sessions = 20, locks = 10, contenders = 100, work_ms = 5;
};

ClientOptions client_options(const Args& a, std::shared_ptr<LockCounts> counts) {
  ClientOptions o;
  o.connect = a.connect;
  o.session_timeout = 10s;
  o.observer = std::move(counts);
  return o;
}

// Issues `n` acquisitions through `start(i, done)`, at most `window` in flight,
// and waits (bounded) for all; the leases land in `out[i]`. Throws on any
// failure. The window matters: a session's requests are answered in order,
// so a heartbeat sent behind 5,000 pipelined creates (times ten sessions on
// one server) is answered seconds later, too late to raise the validity
// bound, and every lease of the session is lost while the state is built.
void pipelined(std::size_t n, std::vector<Lease>& out,
               const std::function<void(std::size_t, AcquireCallback)>& start, std::size_t window = 256) {
  // Shared with the callbacks: one that completes after a timeout threw
  // (when the Client shuts down) must not touch a dead stack frame.
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::size_t left = 0, inflight = 0;
    std::optional<Error> first;
    std::vector<Lease> leases;
  };
  auto st = std::make_shared<State>();
  st->left = n;
  st->leases.resize(n);
  const auto deadline = Clock::now() + 600s;
  for (std::size_t i = 0; i < n; ++i) {
    {
      std::unique_lock lk(st->mu);
      if (!st->cv.wait_until(lk, deadline, [&] { return st->inflight < window; }))
        throw std::runtime_error("acquisitions did not finish");
      ++st->inflight;
    }
    start(i, [st, i](AcquireResult r) {
      std::lock_guard lk(st->mu);
      if (r.error) {
        if (!st->first) st->first = *r.error;
      } else {
        st->leases[i] = std::move(r.lease);
      }
      --st->inflight;
      --st->left;
      st->cv.notify_all();
    });
  }
  std::unique_lock lk(st->mu);
  if (!st->cv.wait_until(lk, deadline, [&] { return st->left == 0; }))
    throw std::runtime_error("acquisitions did not finish");
  if (st->first) throw *st->first;
  out = std::move(st->leases);
}

// --- owners -----------------------------------------------------------------

class Owners {
 public:
  explicit Owners(const Args& a) : a_(a), counts_(std::make_shared<LockCounts>()), client_(client_options(a, counts_)) {
    const auto p = "/p" + std::to_string(a.index);
    client_.ensure_path(a.root + "/owners" + p, CreateMode::persistent);
    client_.ensure_path(a.root + "/held" + p, CreateMode::persistent);
    for (int i = 0; i < a.owners; ++i) {
      const auto id = "p" + std::to_string(a.index) + "/o" + std::to_string(i);
      opts_.push_back(AcquireOptions{.owner = id});
      own_.push_back(std::make_unique<FairMutex>(
          client_, a.root + "/owners" + p + "/o" + std::to_string(i),
          MutexOptions{.retain = std::chrono::milliseconds(a.retain_ms)}));
      for (int j = 0; j < a.held; ++j) {
        held_mutexes_.push_back(std::make_unique<FairMutex>(
            client_, a.root + "/held" + p + "/o" + std::to_string(i) + "-" + std::to_string(j)));
      }
    }
    // The long-lived locks, then every owner's first grant (a create), released
    // into retention.
    pipelined(held_mutexes_.size(), held_, [&](std::size_t k, AcquireCallback done) {
      held_mutexes_[k]->acquire_async(std::move(done), opts_[k / static_cast<std::size_t>(a.held)]);
    });
    std::vector<Lease> first;
    pipelined(own_.size(), first, [&](std::size_t i, AcquireCallback done) {
      own_[i]->acquire_async(std::move(done), opts_[i]);
    });
    for (auto& l : first) l.release();
    std::size_t lost = 0;
    for (auto& l : held_) lost += l.valid() ? 0 : 1;
    if (lost) throw std::runtime_error(std::to_string(lost) + " of " + std::to_string(held_.size()) +
                                       " held locks lost while the state was built");
  }

  json window(Clock::time_point start, Clock::time_point measure, Clock::time_point end) {
    const auto c0 = counts_->snapshot();
    std::vector<LogHistogram> hist(static_cast<std::size_t>(a_.threads));
    std::vector<std::uint64_t> ops(hist.size()), errors(hist.size()), late(hist.size());
    json c_measure;
    std::mutex c_mu;
    double cpu_measure = 0;
    std::vector<std::thread> threads;
    const auto period = std::chrono::nanoseconds(1'000'000'000LL / a_.rate);
    const auto n = own_.size();
    for (int t = 0; t < a_.threads; ++t) {
      threads.emplace_back([&, t] {
        bool measuring = false;
        for (std::int64_t cycle = 0;; ++cycle) {
          for (std::size_t i = static_cast<std::size_t>(t); i < n; i += static_cast<std::size_t>(a_.threads)) {
            const auto due = start + cycle * period + period * static_cast<std::int64_t>(i) / static_cast<std::int64_t>(n);
            if (due >= end) return;
            auto now = Clock::now();
            if (due > now) {
              // 1 ms tick: sleep to the next millisecond past `due`.
              std::this_thread::sleep_until(due + (1ms - std::chrono::nanoseconds(due.time_since_epoch().count() % 1'000'000)));
              now = Clock::now();
            }
            if (!measuring && now >= measure) {
              measuring = true;
              std::lock_guard lk(c_mu);
              if (c_measure.is_null()) {
                c_measure = counts_->snapshot();
                cpu_measure = process_cpu_seconds();
              }
            }
            const auto t0 = Clock::now();
            try {
              Lease l = own_[i]->acquire(opts_[i]);
              const auto t1 = Clock::now();
              l.release();
              if (measuring) {
                hist[static_cast<std::size_t>(t)].add(micros(t1 - t0));
                ++ops[static_cast<std::size_t>(t)];
                if (t0 - due > 10ms) ++late[static_cast<std::size_t>(t)];
              }
            } catch (const Error& e) {
              if (measuring) ++errors[static_cast<std::size_t>(t)];
              spdlog::warn("owner {}: {}", opts_[i].owner, e.what());
            }
          }
        }
      });
    }
    for (auto& th : threads) th.join();
    const double cpu = process_cpu_seconds() - cpu_measure;
    LogHistogram all;
    std::uint64_t total = 0, errs = 0, lates = 0;
    for (std::size_t t = 0; t < hist.size(); ++t) {
      all.merge(hist[t].counts());
      total += ops[t];
      errs += errors[t];
      lates += late[t];
    }
    std::size_t held_valid = 0;
    for (auto& l : held_) held_valid += l.valid() ? 1 : 0;
    const auto c1 = counts_->snapshot();
    return {{"ops", total},
            {"errors", errs},
            {"late", lates},
            {"hist", all.counts()},
            {"cpu_s", cpu},
            {"held_valid", held_valid},
            {"held", held_.size()},
            {"counts", count_diff(c_measure.is_null() ? c0 : c_measure, c1)}};
  }

  ~Owners() {
    for (auto& l : held_) l.release();
  }

 private:
  Args a_;
  std::shared_ptr<LockCounts> counts_;
  Client client_;
  std::vector<AcquireOptions> opts_;
  std::vector<std::unique_ptr<FairMutex>> own_, held_mutexes_;
  std::vector<Lease> held_;
};

}  // namespace

int platform_worker_main(int argc, char** argv) {
  Args a;
  CLI::App app{"zklock-bench platform-worker (started by the platform scenario)"};
  app.add_option("--role", a.role)->required()->check(CLI::IsMember({"owners", "hot"}));
  app.add_option("--connect", a.connect)->required();
  app.add_option("--root", a.root)->required();
  app.add_option("--index", a.index);
  app.add_option("--owners", a.owners);
  app.add_option("--held", a.held);
  app.add_option("--rate", a.rate)->check(CLI::Range(1, 1000));
  app.add_option("--threads", a.threads)->check(CLI::Range(1, 64));
  app.add_option("--retain-ms", a.retain_ms);
  app.add_option("--sessions", a.sessions)->check(CLI::Range(1, 1000));
  app.add_option("--locks", a.locks);
  app.add_option("--contenders", a.contenders);
  app.add_option("--work-ms", a.work_ms);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  spdlog::set_level(spdlog::level::warn);
  try {
    std::unique_ptr<Owners> owners;
    std::unique_ptr<HotLocks> hot;
    if (a.role == "owners") {
      owners = std::make_unique<Owners>(a);
    } else {
      hot = std::make_unique<HotLocks>(a.connect, a.root, a.sessions, a.locks, a.contenders, a.work_ms);
    }
    std::cout << "ready" << std::endl;
    for (std::string line; std::getline(std::cin, line);) {
      std::istringstream in(line);
      std::string cmd;
      in >> cmd;
      if (cmd == "quit") break;
      if (cmd == "queue" && hot) {
        hot->queue();
        std::cout << "queued" << std::endl;
        continue;
      }
      if (cmd != "window") throw std::runtime_error("unknown command: " + line);
      std::int64_t s = 0, m = 0, e = 0;
      in >> s >> m >> e;
      const auto r = owners ? owners->window(from_ns(s), from_ns(m), from_ns(e))
                            : hot->window(from_ns(s), from_ns(m), from_ns(e));
      std::cout << "result " << r.dump() << std::endl;
    }
    owners.reset();
    hot.reset();
    std::cout << "bye" << std::endl;
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "platform-worker " << a.role << " " << a.index << ": " << e.what() << "\n";
    std::cout << "error " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace zklock::bench
