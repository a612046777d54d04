// HotLocks (platform.hpp): the platform's hot locks, every contender driven
// by acquire_async and one timer thread that ends each 5 ms hold.
#include <condition_variable>
#include <mutex>
#include <queue>
#include <thread>

#include <spdlog/spdlog.h>

#include "histogram.hpp"
#include "platform.hpp"
#include "zklock/fair_mutex.hpp"

namespace zklock::bench {

using namespace std::chrono_literals;
using nlohmann::json;

struct HotLocks::Impl : std::enable_shared_from_this<HotLocks::Impl> {
  struct Contender {
    std::unique_ptr<FairMutex> mutex;
    AcquireOptions options;
    std::size_t lock = 0;
    Lease lease;  // the hold being worked; moved out by the timer thread
  };
  using Due = std::pair<Clock::time_point, std::size_t>;

  std::shared_ptr<LockCounts> counts = std::make_shared<LockCounts>();
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<Contender> contenders;
  std::chrono::milliseconds work{5};

  // Invariants (under mu): every contender is in exactly one of: waiting for
  // a grant, in `timers` (holding, or backing off after an error), in
  // `parked` (holding before the window), or finished (counted in `done`).
  // At most one contender of a lock holds it, so the lock's last release is
  // the hand-off the next grant ends.
  std::mutex mu;
  std::condition_variable cv;
  std::priority_queue<Due, std::vector<Due>, std::greater<>> timers;
  std::vector<std::size_t> parked;
  std::vector<std::optional<Clock::time_point>> last_release;  // per lock
  bool queued = false, stopping = false, window_open = false;
  Clock::time_point start, measure, end;
  std::size_t done = 0;
  LogHistogram handoff;
  std::uint64_t grants = 0, errors = 0;
  std::thread timer_thread;

  void acquire(std::size_t i) {
    auto self = shared_from_this();
    contenders[i].mutex->acquire_async([self, i](AcquireResult r) { self->on_grant(i, std::move(r)); },
                                       contenders[i].options);
  }

  void on_grant(std::size_t i, AcquireResult r) {
    const auto now = Clock::now();
    std::lock_guard lk(mu);
    auto& c = contenders[i];
    if (r.error) {
      spdlog::warn("hot {}: {}", c.options.owner, r.error->what());
      if (window_open && now >= measure && now < end) ++errors;
      timers.emplace(now + 10ms, i);  // back off, then queue again (or finish)
      cv.notify_all();
      return;
    }
    c.lease = std::move(r.lease);
    if (!window_open) {
      parked.push_back(i);
      cv.notify_all();
      return;
    }
    if (auto& lr = last_release[c.lock]; lr) {
      if (now >= measure && now < end) handoff.add(micros(now - *lr));
      lr.reset();
    }
    if (now >= measure && now < end) ++grants;
    timers.emplace(std::max(now, start) + work, i);
    cv.notify_all();
  }

  // The timer thread: ends holds (a release, then queue again while the
  // window is open) and retries after errors.
  void run_timers() {
    std::unique_lock lk(mu);
    while (!stopping) {
      if (timers.empty()) {
        cv.wait(lk);
        continue;
      }
      const auto [due, i] = timers.top();
      if (Clock::now() < due) {
        cv.wait_until(lk, due);
        continue;
      }
      timers.pop();
      auto& c = contenders[i];
      const auto now = Clock::now();
      if (c.lease) {
        last_release[c.lock] = now;
        Lease l = std::move(c.lease);
        lk.unlock();
        l.release_async();
        lk.lock();
      }
      // Queue again while the window is open, and after an error before it.
      if ((window_open && now < end) || (!window_open && queued)) {
        lk.unlock();
        acquire(i);
        lk.lock();
      } else {
        ++done;
        cv.notify_all();
      }
    }
  }
};

HotLocks::HotLocks(const std::string& connect, const std::string& root, int sessions, int locks, int contenders,
                   int work_ms)
    : impl_(std::make_shared<Impl>()) {
  auto& m = *impl_;
  m.work = std::chrono::milliseconds(work_ms);
  for (int s = 0; s < sessions; ++s) {
    ClientOptions o;
    o.connect = connect;
    o.session_timeout = 10s;
    o.observer = m.counts;
    m.clients.push_back(std::make_unique<Client>(std::move(o)));
  }
  m.clients.front()->ensure_path(root + "/hot", CreateMode::persistent);
  for (int l = 0; l < locks; ++l) {
    const auto path = root + "/hot/h" + std::to_string(l);
    m.clients.front()->ensure_path(path, CreateMode::persistent);
    for (int k = 0; k < contenders; ++k) {
      auto& client = *m.clients[static_cast<std::size_t>(l * contenders + k) % m.clients.size()];
      m.contenders.push_back({std::make_unique<FairMutex>(client, path),
                              AcquireOptions{.owner = "hot/h" + std::to_string(l) + "/c" + std::to_string(k)},
                              static_cast<std::size_t>(l), Lease{}});
    }
  }
  m.last_release.resize(static_cast<std::size_t>(locks));
  m.timer_thread = std::thread([&m] { m.run_timers(); });
}

HotLocks::~HotLocks() {
  {
    std::lock_guard lk(impl_->mu);
    impl_->stopping = true;
    impl_->cv.notify_all();
  }
  impl_->timer_thread.join();
  for (auto& c : impl_->contenders) c.lease.release();
}

void HotLocks::queue() {
  auto& m = *impl_;
  {
    std::lock_guard lk(m.mu);
    if (m.queued) return;
    m.queued = true;
    m.done = 0;
  }
  for (std::size_t i = 0; i < m.contenders.size(); ++i) m.acquire(i);
  std::unique_lock lk(m.mu);
  if (!m.cv.wait_for(lk, 120s, [&] { return m.parked.size() == m.last_release.size(); })) {
    throw std::runtime_error("hot locks: not every lock was granted within 120 s");
  }
}

json HotLocks::window(Clock::time_point start, Clock::time_point measure, Clock::time_point end) {
  auto& m = *impl_;
  queue();
  const double cpu0 = process_cpu_seconds();
  const auto c0 = m.counts->snapshot();
  {
    std::lock_guard lk(m.mu);
    m.start = start;
    m.measure = measure;
    m.end = end;
    m.handoff = {};
    m.grants = m.errors = 0;
    for (auto& lr : m.last_release) lr.reset();
    m.window_open = true;
    for (auto i : m.parked) m.timers.emplace(start + m.work, i);
    m.parked.clear();
    m.cv.notify_all();
  }
  std::unique_lock lk(m.mu);
  // After `end` nobody queues again; the last waiters are granted one hold apart.
  const auto drained = m.cv.wait_until(lk, end + 120s, [&] { return m.done == m.contenders.size(); });
  m.window_open = false;
  m.queued = false;
  if (!drained) throw std::runtime_error("hot locks: queues did not drain within 120 s of the window's end");
  const double secs = seconds(end - measure);
  return {{"grants", m.grants},
          {"grants_per_s", double(m.grants) / secs},
          {"errors", m.errors},
          {"hist", m.handoff.counts()},
          {"handoff_p50_us", m.handoff.percentile(50)},
          {"handoff_p99_us", m.handoff.percentile(99)},
          {"cpu_s", process_cpu_seconds() - cpu0},
          {"counts", count_diff(c0, m.counts->snapshot())}};
}

}  // namespace zklock::bench
