// zklock::MultiLock — several locks taken as one, in one global order.
//
//   zklock::MultiLock multi(client, {{"/locks/a", zklock::Mode::exclusive},
//                                    {"/locks/b", zklock::Mode::shared}});
//   zklock::MultiLease held = multi.acquire();
//
// Why it cannot deadlock: every MultiLock takes its members in ascending
// byte order of their full paths, whatever order the caller listed them in.
// A cycle of waiters would need some waiter to hold a lock that sorts after
// the one it waits for; a MultiLock only ever waits for a lock that sorts
// after everything it holds. (Locks taken outside MultiLock are not part of
// this argument; the detector still covers them.)
//
// Members are locks like any other: each is FairMutex's recipe (exclusive)
// or FairSharedMutex's (shared) on its own path, interoperating with those
// classes. Duplicate paths are merged; exclusive wins over shared.
//
// All-or-nothing: on a timeout, cancellation or error while taking member k,
// members 0..k-1 are released in reverse order (each release waits for the
// server's answer) and member k's waiting node is deleted, so no node of
// this acquisition is left behind. The timeout of try_acquire_for is one
// deadline across all members.
//
// MutexOptions: loss_policy applies to every member. retain must be zero: a
// MultiLock never retains its members' nodes, and the constructor throws
// Error(invalid_argument) rather than silently ignore it.
//
// Every member is requested by one owner: AcquireOptions::owner, else the
// innermost OwnerScope, else the calling thread's default owner.
//
// Errors thrown by acquire: as FairMutex (would_deadlock, deadlock_victim,
// session_expired, cancelled, closing, invalid_argument, ZooKeeper errors).
//
// Thread-safety: a MultiLock may be shared by threads; each acquisition is
// independent. A MultiLease is one value: use it from one thread at a time,
// except on_lost()/valid()/lost_token(), which may be called concurrently.
// The Client must outlive the MultiLock and its MultiLeases.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <string_view>
#include <vector>

#include "zklock/client.hpp"
#include "zklock/lease.hpp"
#include "zklock/options.hpp"

namespace zklock {

struct LockSpec {
  std::string path;
  Mode mode = Mode::exclusive;
};

// The leases of one MultiLock acquisition, one per member in path order.
// The destructor releases them (reverse order); release() does so at once.
class MultiLease {
 public:
  // Runs once for the whole set, on the client's callback thread, when the
  // first member is lost; names that member. Not called on release().
  using LostCallback = std::function<void(const std::string& lock_path, LossReason, const std::string& detail)>;

  MultiLease() = default;  // holds nothing
  MultiLease(MultiLease&&) noexcept = default;
  MultiLease& operator=(MultiLease&& other) noexcept;
  ~MultiLease();

  // True when this object holds an acquisition (even a lost one).
  explicit operator bool() const noexcept { return !leases_.empty(); }

  // In path order (MultiLock::locks()).
  const std::vector<Lease>& leases() const noexcept { return leases_; }
  // The member for `lock_path`; throws Error(invalid_argument) if it is none.
  const Lease& lease(std::string_view lock_path) const;
  // Fencing tokens are per lock: each protected resource checks the token
  // of the lock that guards it.
  const FencingToken& token(std::string_view lock_path) const { return lease(lock_path).token(); }

  // Every member valid (Lease::valid()) and the set not lost.
  bool valid() const;
  // The first member loss, if any.
  std::optional<LossReason> loss_reason() const;
  // "<lock path>: <detail>" of the first member loss, or empty.
  std::string loss_detail() const;
  // Registers `cb` (at once, on the callback thread, if already lost).
  void on_lost(LostCallback cb);
  // Fired when the first member is lost.
  std::stop_token lost_token() const;

  // Releases the members in reverse path order; idempotent. Never throws.
  void release() noexcept;

 private:
  friend class MultiLock;
  struct State;
  MultiLease(Client& client, std::vector<Lease> leases);

  std::vector<Lease> leases_;
  std::shared_ptr<State> state_;
};

// The outcome of MultiLock::acquire_async: the whole set, or the error.
struct MultiAcquireResult {
  MultiLease lease;
  std::optional<Error> error;
};
using MultiAcquireCallback = std::function<void(MultiAcquireResult)>;

class MultiLock {
 public:
  // Sorts and merges `locks`. Throws Error(invalid_argument) for an empty
  // set, a malformed path, or options.retain other than zero.
  MultiLock(Client& client, std::vector<LockSpec> locks, MutexOptions options = {});

  // Blocks until every member is granted. Throws Error.
  MultiLease acquire(const AcquireOptions& options = {});
  // As acquire(), but gives up with Errc::cancelled when `stop` fires.
  MultiLease acquire(std::stop_token stop, const AcquireOptions& options = {});
  // Nullopt when the whole set is not granted within `timeout`.
  std::optional<MultiLease> try_acquire_for(std::chrono::milliseconds timeout, const AcquireOptions& options = {});
  // As FairMutex::acquire_async: no thread per waiter; `done` runs once, on
  // the client's callback thread, with the whole set or the error (timeout,
  // cancelled, would_deadlock, ...). `timeout` (zero: none) is one deadline
  // across all members; `stop` bounds the wait. On failure the members
  // already taken are released (release_async, reverse order) before `done`
  // runs, and the failing member's waiting node is deleted.
  void acquire_async(MultiAcquireCallback done, const AcquireOptions& options = {},
                     std::chrono::milliseconds timeout = std::chrono::milliseconds::zero(),
                     std::stop_token stop = {});

  // The members in acquisition order: sorted by path, duplicates merged.
  const std::vector<LockSpec>& locks() const noexcept { return locks_; }

 private:
  // The one path behind the three forms. `deadline` unset: none. Errors
  // (including Errc::timeout) are thrown after the taken members are released.
  MultiLease run(std::stop_token stop, std::optional<std::chrono::steady_clock::time_point> deadline, const AcquireOptions& options);
  // acquire_async's chain: takes member `run->taken.size()` next.
  struct AsyncRun;
  static void step(std::shared_ptr<AsyncRun> run);
  // The owner every member is requested by (see the file comment).
  AcquireOptions with_owner(const AcquireOptions& options) const;

  Client* client_;
  std::vector<LockSpec> locks_;
  MutexOptions options_;
};

}  // namespace zklock
