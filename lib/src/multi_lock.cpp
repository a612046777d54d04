// MultiLock: members taken one by one in path order through the one recipe core; a failure unwinds.
#include "zklock/multi_lock.hpp"

#include <algorithm>
#include <mutex>

#include "lock_front.hpp"
#include "try_timeout.hpp"
#include "zklock/path.hpp"

namespace zklock {

// Shared with every member's on_lost callback, so a member loss reported
// after the MultiLease moved or died finds live state.
struct MultiLease::State {
  Client* client = nullptr;
  std::mutex mu;
  bool released = false;                   // GUARDED_BY(mu)
  std::optional<std::string> lost_path;    // GUARDED_BY(mu); set once
  LossReason reason = LossReason::revoked; // GUARDED_BY(mu)
  std::string detail;                      // GUARDED_BY(mu)
  std::vector<LostCallback> callbacks;     // GUARDED_BY(mu)
  std::stop_source lost_source;

  // On the callback thread, from a member's on_lost. Fires the set once.
  void member_lost(const std::string& path, LossReason r, const std::string& d) {
    std::vector<LostCallback> cbs;
    {
      std::lock_guard lk(mu);
      if (released || lost_path) return;
      lost_path = path;
      reason = r;
      detail = d;
      cbs = std::move(callbacks);
      callbacks.clear();
    }
    lost_source.request_stop();
    for (auto& cb : cbs) cb(path, r, d);
  }
};

MultiLease::MultiLease(Client& client, std::vector<Lease> leases)
    : leases_(std::move(leases)), state_(std::make_shared<State>()) {
  state_->client = &client;
  for (auto& l : leases_) {
    l.on_lost([state = state_, path = l.lock_path()](LossReason r, const std::string& d) {
      state->member_lost(path, r, d);
    });
  }
}

MultiLease& MultiLease::operator=(MultiLease&& other) noexcept {
  if (this != &other) {
    release();
    leases_ = std::move(other.leases_);
    state_ = std::move(other.state_);
  }
  return *this;
}

MultiLease::~MultiLease() { release(); }

const Lease& MultiLease::lease(std::string_view lock_path) const {
  for (const auto& l : leases_) {
    if (l.lock_path() == lock_path) return l;
  }
  throw Error(Errc::invalid_argument, "'" + std::string(lock_path) + "' is not a member of this MultiLease");
}

bool MultiLease::valid() const {
  if (!state_) return false;
  {
    std::lock_guard lk(state_->mu);
    if (state_->released || state_->lost_path) return false;
  }
  return std::all_of(leases_.begin(), leases_.end(), [](const Lease& l) { return l.valid(); });
}

std::optional<LossReason> MultiLease::loss_reason() const {
  if (!state_) return std::nullopt;
  std::lock_guard lk(state_->mu);
  if (!state_->lost_path) return std::nullopt;
  return state_->reason;
}

std::string MultiLease::loss_detail() const {
  if (!state_) return {};
  std::lock_guard lk(state_->mu);
  return state_->lost_path ? *state_->lost_path + ": " + state_->detail : std::string();
}

void MultiLease::on_lost(LostCallback cb) {
  if (!state_) return;
  std::lock_guard lk(state_->mu);
  if (state_->lost_path) {
    state_->client->post([cb = std::move(cb), p = *state_->lost_path, r = state_->reason, d = state_->detail] {
      cb(p, r, d);
    });
    return;
  }
  state_->callbacks.push_back(std::move(cb));
}

std::stop_token MultiLease::lost_token() const {
  return state_ ? state_->lost_source.get_token() : std::stop_token();
}

void MultiLease::release() noexcept {
  if (state_) {
    std::lock_guard lk(state_->mu);
    state_->released = true;
  }
  for (auto it = leases_.rbegin(); it != leases_.rend(); ++it) it->release();
}

MultiLock::MultiLock(Client& client, std::vector<LockSpec> locks, MutexOptions options)
    : client_(&client), locks_(std::move(locks)), options_(options) {
  if (locks_.empty()) throw Error(Errc::invalid_argument, "MultiLock needs at least one lock");
  if (options_.retain != std::chrono::milliseconds::zero()) {
    throw Error(Errc::invalid_argument,
                "MultiLock does not retain leases: MutexOptions::retain must be zero (use FairMutex to retain)");
  }
  for (const auto& l : locks_) validate_lock_path(l.path);
  // The global order: ascending bytes of the full path. Merge duplicates,
  // exclusive over shared (a shared and an exclusive request by one owner
  // would wait for each other).
  std::stable_sort(locks_.begin(), locks_.end(), [](const LockSpec& a, const LockSpec& b) { return a.path < b.path; });
  std::vector<LockSpec> merged;
  for (auto& l : locks_) {
    if (!merged.empty() && merged.back().path == l.path) {
      if (l.mode == Mode::exclusive) merged.back().mode = Mode::exclusive;
    } else {
      merged.push_back(std::move(l));
    }
  }
  locks_ = std::move(merged);
}

MultiLease MultiLock::run(std::stop_token stop, std::optional<Clock::time_point> deadline,
                          const AcquireOptions& options) {
  const AcquireOptions opts = with_owner(options);

  std::vector<Lease> taken;
  taken.reserve(locks_.size());
  auto unwind = [&taken] {
    for (auto it = taken.rbegin(); it != taken.rend(); ++it) it->release();
  };
  for (const auto& spec : locks_) {
    detail::AttemptRequest req;
    req.lock_path = spec.path;
    req.mode = spec.mode;
    req.options = opts;
    req.policy = options_.loss_policy;
    req.stop = stop;
    if (deadline) {
      const auto left = std::chrono::ceil<std::chrono::milliseconds>(*deadline - Clock::now());
      if (left <= std::chrono::milliseconds::zero()) {
        unwind();
        throw Error(Errc::timeout, "timed out waiting for " + spec.path);
      }
      req.timeout = left;
    }
    AcquireResult r;
    try {
      r = detail::LockAttempt::run_blocking(*client_, std::move(req));
    } catch (...) {  // would_deadlock, invalid_state: nothing of this member exists
      unwind();
      throw;
    }
    if (r.error) {
      unwind();
      throw std::move(*r.error);
    }
    taken.push_back(std::move(r.lease));
  }
  return MultiLease(*client_, std::move(taken));
}

AcquireOptions MultiLock::with_owner(const AcquireOptions& options) const {
  AcquireOptions opts = options;
  opts.owner = detail::owner_for(*client_, options);
  return opts;
}

// One acquire_async in flight. Only one member's attempt runs at a time and
// each step runs on the client's callback thread (or the caller's, for the
// first), so the fields need no lock.
struct MultiLock::AsyncRun {
  Client* client = nullptr;
  std::vector<LockSpec> locks;
  AcquireOptions options;
  LossPolicy policy = LossPolicy::tolerant;
  std::optional<Clock::time_point> deadline;
  std::stop_token stop;
  std::vector<Lease> taken;
  MultiAcquireCallback done;

  // Releases what was taken and hands `done` the error, on the callback
  // thread (never inline in acquire_async's caller).
  void fail(Error error) {
    for (auto it = taken.rbegin(); it != taken.rend(); ++it) it->release_async();
    taken.clear();
    client->post([done = std::move(done), error = std::move(error)] { done(MultiAcquireResult{MultiLease(), error}); });
  }
};

void MultiLock::step(std::shared_ptr<AsyncRun> run) {
  if (run->taken.size() == run->locks.size()) {
    run->done(MultiAcquireResult{MultiLease(*run->client, std::move(run->taken)), std::nullopt});
    return;
  }
  const auto& spec = run->locks[run->taken.size()];
  detail::AttemptRequest req;
  req.lock_path = spec.path;
  req.mode = spec.mode;
  req.options = run->options;
  req.policy = run->policy;
  req.stop = run->stop;
  if (run->deadline) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(*run->deadline - Clock::now());
    if (left <= std::chrono::milliseconds::zero()) {
      run->fail(Error(Errc::timeout, "timed out waiting for " + spec.path));
      return;
    }
    req.timeout = left;
  }
  try {
    detail::start_async(*run->client, std::move(req), [run](AcquireResult r) {
      if (r.error) {
        run->fail(std::move(*r.error));
        return;
      }
      run->taken.push_back(std::move(r.lease));
      step(run);
    });
  } catch (const Error& e) {  // would_deadlock, invalid_state: nothing of this member exists
    run->fail(e);
  }
}

void MultiLock::acquire_async(MultiAcquireCallback done, const AcquireOptions& options,
                              std::chrono::milliseconds timeout, std::stop_token stop) {
  auto run = std::make_shared<AsyncRun>();
  run->client = client_;
  run->locks = locks_;
  run->options = with_owner(options);
  run->policy = options_.loss_policy;
  if (timeout > std::chrono::milliseconds::zero()) run->deadline = Clock::now() + timeout;
  run->stop = std::move(stop);
  run->done = std::move(done);
  run->taken.reserve(locks_.size());
  step(std::move(run));
}

MultiLease MultiLock::acquire(const AcquireOptions& options) { return run({}, std::nullopt, options); }

MultiLease MultiLock::acquire(std::stop_token stop, const AcquireOptions& options) {
  return run(std::move(stop), std::nullopt, options);
}

std::optional<MultiLease> MultiLock::try_acquire_for(std::chrono::milliseconds timeout,
                                                     const AcquireOptions& options) {
  try {
    return run({}, Clock::now() + detail::try_timeout(timeout), options);
  } catch (const Error& e) {
    if (e.code() == Errc::timeout) return std::nullopt;
    throw;
  }
}

}  // namespace zklock
