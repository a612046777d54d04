// Async waiters for the big-queue stories: each releases at once when granted and records its outcome.
#pragma once

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "zklock/fair_mutex.hpp"

namespace zklock::test {

// What the waiters' callbacks record. Declared before the clients, so it
// outlives them, and every callback still pending, on an early return.
struct Outcomes {
  explicit Outcomes(int n) : grants(static_cast<std::size_t>(n), 0) {}
  std::mutex mu;
  std::condition_variable cv;
  std::vector<int> grants;  // GUARDED_BY(mu): per waiter
  int done = 0, failed = 0;  // GUARDED_BY(mu)
  std::atomic<int> inside{0}, overlaps{0};

  // Empty when no waiter failed, none was granted while another held, and
  // each was granted exactly once; otherwise what went wrong.
  std::string faults() {
    std::lock_guard lk(mu);
    int not_once = 0;
    for (int g : grants) not_once += g != 1;
    std::string f;
    if (failed != 0) f += std::to_string(failed) + " failed; ";
    if (overlaps.load() != 0) f += std::to_string(overlaps.load()) + " granted while another held; ";
    if (not_once != 0) f += std::to_string(not_once) + " not granted exactly once; ";
    return f;
  }
};

// Queues `n` async waiters ("w-<i>") on `m`; each releases at once when
// granted and records its outcome in `out`.
inline void queue_waiters(FairMutex& m, Outcomes& out, int n) {
  for (int i = 0; i < n; ++i) {
    m.acquire_async(
        [&out, i](AcquireResult r) {
          if (!r.error) {
            if (out.inside.fetch_add(1) != 0) ++out.overlaps;
            out.inside.fetch_sub(1);
            r.lease.release();
          }
          std::lock_guard lk(out.mu);
          if (r.error) ++out.failed;
          else ++out.grants[static_cast<std::size_t>(i)];
          ++out.done;
          out.cv.notify_all();
        },
        {.owner = "w-" + std::to_string(i)});
  }
}

}  // namespace zklock::test
