// zklock::FairSharedMutex — a FIFO read-write lock across processes.
//
// Readers ('r' nodes) and writers ('w' nodes) share one ephemeral-sequential
// queue under the lock path (docs/protocol.md). The recipe is FairMutex's
// core, with one rule per mode:
//
//   writer  granted when no earlier node exists; watches its predecessor.
//   reader  granted when no earlier *writer* exists; watches the nearest
//           earlier writer. Readers never wait for readers.
//
// Fair: a reader that arrives after a waiting writer queues behind it, so a
// continuous stream of readers cannot starve a writer; grants follow arrival
// order except that adjacent readers are granted together.
//
// Both families return a Lease with a fencing token (the node's czxid, as
// for FairMutex), with the same loss and cancellation semantics. Several
// readers hold at once, each with its own token: a reader's token exceeds
// every writer token granted before it and is below every writer token
// granted after it, but says nothing about order among readers holding
// together. Fence writes with writer tokens.
//
// Not re-entrant: the same owner asking for this lock (in either mode) while
// it holds or waits for it in this process fails with Errc::would_deadlock.
// Threads of one process that want to read at once need distinct owners —
// the default owner ("<host>/<pid>/<thread>") already is.
//
// Errors: as FairMutex (would_deadlock, deadlock_victim, session_expired,
// cancelled, closing, invalid_argument, ZooKeeper errors).
//
// Thread-safety: may be shared by threads; each acquisition is independent.
// The Client must outlive the mutex and its leases.
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
}

class FairSharedMutex {
 public:
  // Throws Error(invalid_argument) for a malformed lock path.
  FairSharedMutex(Client& client, std::string lock_path, MutexOptions options = {});

  // --- exclusive (writer): FairMutex's four forms, meaning the same ---
  Lease acquire(const AcquireOptions& options = {});
  Lease acquire(std::stop_token stop, const AcquireOptions& options = {});
  std::optional<Lease> try_acquire_for(std::chrono::milliseconds timeout, const AcquireOptions& options = {});
  void acquire_async(AcquireCallback done, const AcquireOptions& options = {},
                     std::chrono::milliseconds timeout = std::chrono::milliseconds::zero(),
                     std::stop_token stop = {});

  // --- shared (reader): the same four forms ---
  Lease acquire_shared(const AcquireOptions& options = {});
  Lease acquire_shared(std::stop_token stop, const AcquireOptions& options = {});
  std::optional<Lease> try_acquire_shared_for(std::chrono::milliseconds timeout, const AcquireOptions& options = {});
  void acquire_shared_async(AcquireCallback done, const AcquireOptions& options = {},
                            std::chrono::milliseconds timeout = std::chrono::milliseconds::zero(),
                            std::stop_token stop = {});

  const std::string& path() const noexcept { return path_; }

 private:
  // The one blocking path behind the six synchronous forms: timeout zero
  // means none; a timeout yields Errc::timeout in the result.
  AcquireResult run(Mode mode, std::stop_token stop, std::chrono::milliseconds timeout,
                    const AcquireOptions& options);
  void start(Mode mode, AcquireCallback done, const AcquireOptions& options, std::chrono::milliseconds timeout,
             std::stop_token stop);

  Client* client_;
  std::string path_;
  MutexOptions options_;
  std::shared_ptr<detail::RetainSlot> retained_;  // the writers' idle retained attempt, if any
};

}  // namespace zklock
