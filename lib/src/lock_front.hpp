// What the front ends (FairMutex, FairSharedMutex, MultiLock) and LockAttempt share: a request's owner, a mutex's request, results to leases, the asynchronous start.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>

#include "lock_attempt.hpp"

namespace zklock::detail {

// The owner a request acts for: its own, else the thread's OwnerScope, else
// the client's default. Read on the caller's thread (OwnerScope is per thread).
std::string owner_for(const Client& client, const AcquireOptions& options);
// Who a request acts for, as its node's data will say.
Holder holder_for(const Client& client, const AttemptRequest& request);

// A mutex's request: its loss policy and its retention (a reader's is
// dropped by LockAttempt::start). Timeout zero: none.
AttemptRequest mutex_request(const std::string& lock_path, Mode mode, const AcquireOptions& options,
                             const MutexOptions& mutex, const std::shared_ptr<RetainSlot>& slot,
                             std::chrono::milliseconds timeout = {}, std::stop_token stop = {});
// The lease, or the error thrown.
Lease take_lease(AcquireResult result);
// Nullopt for a timeout; otherwise as take_lease.
std::optional<Lease> take_lease_unless_timeout(AcquireResult result);
// Starts an acquisition whose outcome goes to `done` on the client's callback
// thread (LockAttempt's own `done` runs on ZooKeeper's completion thread or
// the client's timer thread, which user code must not hold up).
void start_async(Client& client, AttemptRequest request, AcquireCallback done);

}  // namespace zklock::detail
