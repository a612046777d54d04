// The floor's step-up (platform_parts.hpp): the textbook recipe's owners,
// each taking its own lock 10 times a second, at rising total rates beside
// the platform's hot locks and held state, until a step is not sustained.
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "floor.hpp"
#include "histogram.hpp"
#include "platform_parts.hpp"

namespace zklock::bench {

using namespace std::chrono_literals;

namespace {

// Creates `paths` (persistent, parents existing) pipelined on one session;
// existing nodes are fine. Bounded wait.
void create_all(FloorSession& s, const std::vector<std::string>& paths) {
  struct Wait {
    std::mutex mu;
    std::condition_variable cv;
    std::size_t left;
    int bad = ZOK;
  };
  auto w = std::make_shared<Wait>();
  w->left = paths.size();
  for (const auto& p : paths) {
    auto* hold = new std::shared_ptr<Wait>(w);
    const int rc = zoo_acreate(
        s.zh(), p.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, 0,
        [](int rc, const char*, const void* data) {
          auto* h = static_cast<std::shared_ptr<Wait>*>(const_cast<void*>(data));
          {
            std::lock_guard lk((*h)->mu);
            if (rc != ZOK && rc != ZNODEEXISTS) (*h)->bad = rc;
            if (--(*h)->left == 0) (*h)->cv.notify_all();
          }
          delete h;
        },
        hold);
    if (rc != ZOK) {
      delete hold;
      std::lock_guard lk(w->mu);
      w->bad = rc;
      --w->left;
    }
  }
  std::unique_lock lk(w->mu);
  if (!w->cv.wait_for(lk, 120s, [&] { return w->left == 0; })) throw std::runtime_error("floor: creates timed out");
  if (w->bad != ZOK) throw std::runtime_error(std::string("floor: create failed: ") + zerror(w->bad));
}

struct Side {
  std::mutex mu;
  LogHistogram hist;  // GUARDED_BY(mu)
  std::atomic<std::uint64_t> done{0}, errors{0}, missed{0};
};

// One step: `owners` owners over `sessions`, from `start` to `end`, measured
// from `measure`. Each owner's next operation is skipped (missed) while its
// previous one is still out.
FloorStep run_step(std::vector<std::unique_ptr<FloorSession>>& sessions, const std::vector<std::string>& paths,
                   int owners, int rate_hz, Clock::time_point start, Clock::time_point measure, Clock::time_point end) {
  auto side = std::make_shared<Side>();
  auto busy = std::make_shared<std::vector<std::atomic<bool>>>(static_cast<std::size_t>(owners));
  const auto period = std::chrono::nanoseconds(1'000'000'000LL / rate_hz);
  std::vector<std::thread> threads;
  const auto n = static_cast<std::size_t>(owners);
  for (std::size_t t = 0; t < sessions.size(); ++t) {
    threads.emplace_back([&, t] {
      auto& session = *sessions[t];
      for (std::int64_t cycle = 0;; ++cycle) {
        for (std::size_t i = t; i < n; i += sessions.size()) {
          const auto due = start + cycle * period + period * static_cast<std::int64_t>(i) / static_cast<std::int64_t>(n);
          if (due >= end) return;
          if (due > Clock::now()) {
            std::this_thread::sleep_until(due + (1ms - std::chrono::nanoseconds(due.time_since_epoch().count() % 1'000'000)));
          }
          const auto t0 = Clock::now();
          const bool counted = t0 >= measure;
          if ((*busy)[i].exchange(true)) {
            if (counted) ++side->missed;
            continue;
          }
          floor_acquire_async(session, paths[i], [side, busy, i, t0, counted, &session](int rc, const std::string& node) {
            if (rc != ZOK) {
              if (counted) ++side->errors;
              (*busy)[i] = false;
              return;
            }
            if (counted) {
              std::lock_guard lk(side->mu);
              side->hist.add(micros(Clock::now() - t0));
            }
            floor_release_async(session, node, [side, busy, i, counted](int rc) {
              if (rc != ZOK && counted) ++side->errors;
              if (counted) ++side->done;
              (*busy)[i] = false;
            });
          });
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  // Let the last operations finish (bounded) before the next step.
  const auto deadline = Clock::now() + 30s;
  for (auto& b : *busy) {
    while (b.load() && Clock::now() < deadline) std::this_thread::sleep_for(1ms);
  }
  FloorStep st;
  st.rate = double(owners) * rate_hz;
  st.achieved = double(side->done.load()) / seconds(end - measure);
  st.missed = double(side->missed.load());
  st.errors = double(side->errors.load());
  std::lock_guard lk(side->mu);
  st.p50_us = side->hist.percentile(50);
  st.p99_us = side->hist.percentile(99);
  st.sustained = st.errors == 0 && st.missed == 0 && st.achieved >= 0.95 * st.rate && st.p99_us <= 10'000;
  return st;
}

}  // namespace

FloorResult floor_step_up(const Env& env, const std::string& root, const PlatformSizes& p, const HotWindow& hot_window,
                          const std::function<nlohmann::json(Clock::time_point)>& hot_result) {
  std::vector<std::unique_ptr<FloorSession>> sessions;
  for (int k = 0; k < p.processes; ++k) sessions.push_back(std::make_unique<FloorSession>(env.connect, 10s));
  sessions.front()->ensure_path(root + "/floor");
  std::vector<std::string> paths;
  FloorResult out;
  for (double rate = p.floor_start; rate <= p.floor_max; rate *= 2) {
    const int owners = std::max(1, static_cast<int>(rate / p.rate_hz));
    std::vector<std::string> fresh;
    while (static_cast<int>(paths.size()) < owners) {
      paths.push_back(root + "/floor/o" + std::to_string(paths.size()));
      fresh.push_back(paths.back());
    }
    create_all(*sessions.front(), fresh);
    const auto [start, measure, end] = hot_window(p.floor_warmup_s, p.floor_step_s);
    const auto step = run_step(sessions, paths, owners, p.rate_hz, start, measure, end);
    hot_result(end);
    env.log("platform: floor at " + std::to_string(static_cast<int>(step.rate)) + " ops/s: achieved " +
            std::to_string(static_cast<int>(step.achieved)) + ", p99 " + std::to_string(static_cast<int>(step.p99_us)) +
            " us" + (step.sustained ? "" : " (not sustained)"));
    out.steps.push_back(step);
    if (!step.sustained) break;
    out.max_ops_per_s = step.rate;
  }
  return out;
}

}  // namespace zklock::bench
