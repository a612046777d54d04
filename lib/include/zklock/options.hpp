// zklock's request vocabulary: what a lock request carries (AcquireOptions,
// OwnerScope), how a lock object treats its leases (MutexOptions,
// LossPolicy), and what an asynchronous acquisition hands back
// (AcquireResult, AcquireCallback). Shared by every lock class, so that
// FairSharedMutex and MultiLock need not include FairMutex for them.
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "zklock/error.hpp"
#include "zklock/lease.hpp"

namespace zklock {

// What a lock request carries besides the lock path.
struct AcquireOptions {
  // The actor whose holds and waits form the wait-for graph. Empty: the
  // innermost OwnerScope on this thread, else Client::default_owner().
  std::string owner;
  // Larger is more important; the detector's lowest-priority policy revokes
  // the smallest. Recorded in the node data.
  int priority = 0;
  std::string description;
};

// Sets the default owner for lock requests made on this thread while alive.
// Nested scopes stack.
class OwnerScope {
 public:
  explicit OwnerScope(std::string owner);
  ~OwnerScope();
  OwnerScope(const OwnerScope&) = delete;
  OwnerScope& operator=(const OwnerScope&) = delete;
  // The innermost scope's owner on this thread, or empty.
  static const std::string& current() noexcept;

 private:
  std::string previous_;
};

// How a lease treats a disconnect.
enum class LossPolicy {
  tolerant,  // suspended until valid_until(); lost if the session does not return by then
  strict,    // lost at the first disconnect; the node is deleted once reconnected
};

struct MutexOptions {
  LossPolicy loss_policy = LossPolicy::tolerant;
  // Keep a released node idle for this long for a re-take (zero: off).
  // Exclusive acquisitions only; readers of a FairSharedMutex never retain.
  std::chrono::milliseconds retain{0};
};

// The outcome of an asynchronous acquisition: a lease, or the error.
struct AcquireResult {
  Lease lease;
  std::optional<Error> error;
};
using AcquireCallback = std::function<void(AcquireResult)>;

}  // namespace zklock
