// zklock::FairMutex — FIFO mutual exclusion across processes.
//
// The ephemeral-sequential recipe (docs/design.md): each acquisition creates
// one EPHEMERAL_SEQUENTIAL child of the lock path; the lowest child holds the
// lock; every waiter watches only its immediate predecessor, so a release
// wakes exactly one waiter and grants are strictly in arrival order.
//
// zklock locks are not re-entrant: the same owner asking for a lock it
// already holds or waits for in this process fails at once with
// Errc::would_deadlock (it would otherwise wait for itself forever).
//
// Errors thrown by acquire: would_deadlock; deadlock_victim (the detector
// revoked our waiting node; the message carries the cycle); session_expired;
// cancelled; closing; invalid_argument; ZooKeeper errors (no_auth, ...). A
// timeout throws nothing: try_acquire_for gives nullopt, acquire_async Errc::timeout.
//
// Retained leases (MutexOptions::retain, exclusive only; default off):
//
//   zklock::FairMutex mutex(client, "/locks/invoice-42", {.retain = 500ms});
//   zklock::Lease a = mutex.acquire();  // as always
//   a.release();                        // nobody waits: the node stays idle, no request sent
//   zklock::Lease b = mutex.acquire();  // re-take: no request, b.token() > a.token() (same czxid)
//
// A release while nobody is known to wait keeps the node, idle, for up to
// `retain`; a children watch on the lock ends the retention as soon as
// someone queues (the node is then deleted at once, with the hand-off), as
// does the retain time running out. A re-take by the same owner through the
// same mutex object is decided locally, with no request: it grants the same
// node again, as a new lease: the node's czxid with the next lease ordinal
// (zklock/token.hpp), so a fence refuses the earlier lease's late writes
// once this one has written; while the client is connected, inside
// its validity bound, and the watch has not fired; otherwise the node is
// released and the re-take is a normal acquisition (behind any waiter).
// Fairness: the owner may re-take until the watch's notification arrives,
// never after, so a waiter waits at most one notification plus one hold
// (docs/design.md, "Retained leases"). Another holder's token is always
// larger. Another owner queues normally, which ends the retention; so does
// destroying the last copy of the mutex.
//
// Thread-safety: a FairMutex may be shared by threads; each acquisition is
// independent. The Client must outlive the mutex and its leases.
#pragma once

#include <chrono>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>

#include "zklock/client.hpp"
#include "zklock/lease.hpp"
#include "zklock/options.hpp"

namespace zklock {

namespace detail {
struct RetainSlot;
struct AttemptRequest;
}

class FairMutex {
 public:
  // Throws Error(invalid_argument) for a malformed lock path.
  FairMutex(Client& client, std::string lock_path, MutexOptions options = {});

  // Blocks until granted. Throws Error.
  Lease acquire(const AcquireOptions& options = {});
  // As acquire(), but gives up with Errc::cancelled when `stop` fires.
  Lease acquire(std::stop_token stop, const AcquireOptions& options = {});
  // Nullopt when not granted within `timeout` (our node is then deleted).
  std::optional<Lease> try_acquire_for(std::chrono::milliseconds timeout, const AcquireOptions& options = {});
  // No thread per waiter: `done` runs on the client's callback thread.
  // `timeout` (zero: none) and `stop` bound the wait like the sync forms.
  void acquire_async(AcquireCallback done, const AcquireOptions& options = {},
                     std::chrono::milliseconds timeout = std::chrono::milliseconds::zero(),
                     std::stop_token stop = {});

  const std::string& path() const noexcept { return path_; }

 private:
  detail::AttemptRequest make_request(const AcquireOptions& options) const;

  Client* client_;
  std::string path_;
  MutexOptions options_;
  std::shared_ptr<detail::RetainSlot> retained_;  // the idle retained attempt, if any
};

}  // namespace zklock
