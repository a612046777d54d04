// zklock::Lease — a granted lock, its fencing token, and how it can be lost.
//
// A Lease is the proof of one acquisition: it owns the lock node (the
// destructor releases it) and carries the FencingToken that the protected
// resource must check on every write. A lease can be lost without the
// holder doing anything; zklock reports it at once, not on the next write:
//
//   session_expired   the server expired the session; the node is gone.
//   validity_expired  the connection dropped and the client's valid_until()
//                     (the provable bound before which the server cannot
//                     have expired the session) passed before the same
//                     session came back. The node may still exist, but
//                     nobody can prove it, so the lease is over.
//   revoked           someone else deleted the node: the deadlock detector
//                     or an operator; detail() carries the recorded reason.
//   disconnected      the opt-in strict policy: the first disconnect ends
//                     the lease, and the node is deleted once reconnected.
//
// A lease is handed out only while valid() holds: acquire (and every
// variant) returns once the session's validity bound covers the grant. Just
// after a reconnect the bound must be proven again on the new connection,
// so a grant made then waits for that proof (typically under a second)
// within the request's timeout; when the timeout or stop comes first, the
// grant is released and the caller gets the timeout or cancellation, and
// when the grant is lost first, session_expired (or deadlock_victim). The
// one exception: a session whose server settings refuse any bound (logged
// as an error at connect) gets its leases at once, with valid() false.
//
// While disconnected but still within valid_until() the lease is
// suspended(): valid() stays true, and if the same session returns in time
// the lease simply continues.
//
// Retained leases (MutexOptions::retain): a re-take reuses the same lock
// node; each lease still speaks only for its own grant — after release()
// valid() is false and token() keeps its own token (a re-take's: the node's
// czxid, the next lease ordinal), even when a later lease re-took the node.
//
// Thread-safety: all methods may be called concurrently. on_lost callbacks
// run on the client's callback thread, once.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>

#include "zklock/error.hpp"
#include "zklock/mode.hpp"
#include "zklock/token.hpp"

namespace zklock {

enum class LossReason { session_expired, validity_expired, revoked, disconnected };
std::string_view loss_reason_name(LossReason r) noexcept;

namespace detail {
class LockAttempt;
}

class Lease {
 public:
  Lease() = default;  // holds nothing
  Lease(Lease&& other) noexcept
      : attempt_(std::move(other.attempt_)), grant_(other.grant_), token_(std::move(other.token_)) {}
  Lease& operator=(Lease&& other) noexcept;
  ~Lease();

  // True when this object holds an acquisition (even a lost one).
  explicit operator bool() const noexcept { return attempt_ != nullptr; }

  const FencingToken& token() const;
  // Not lost, not released, and the session is provably alive (now < valid_until()).
  bool valid() const;
  // Disconnected, but still within the validity bound.
  bool suspended() const;
  std::optional<LossReason> loss_reason() const;
  // Human-readable reason of the loss (for revocations: the recorded reason or cycle).
  std::string loss_detail() const;

  // Registers `cb` to run once when the lease is lost (at once, on the
  // callback thread, if it is already lost). Not called on release().
  void on_lost(std::function<void(LossReason, const std::string& detail)> cb);
  // Fired (requested to stop) when the lease is lost.
  std::stop_token lost_token() const;

  // Deletes our node (with the hand-off marker if anyone may wait) and waits for the answer,
  // at most about one session timeout; idempotent. Never throws.
  void release() noexcept;
  // The same without waiting: the delete is sent and this returns at once.
  // `done` (optional) runs once on the client's callback thread when the node
  // is gone — deleted, or gone with its session; after a disconnect the
  // delete is retried when the same session returns. On a lease already
  // released it is posted at once; on one that holds nothing (default or
  // moved-from) it runs at once on the calling thread. `done` does not run
  // if the Client is closed first. Never throws.
  void release_async(std::function<void()> done = {}) noexcept;

  const std::string& lock_path() const;
  const std::string& node_path() const;
  const std::string& owner() const;
  Mode mode() const;

 private:
  // Leases are made only by zklock's lock recipe (lib/src), which is why no
  // detail:: type appears in a public constructor.
  friend class detail::LockAttempt;  // the constructor, and grant_of() for ClientOptions::observer
  explicit Lease(std::shared_ptr<detail::LockAttempt> attempt);

  std::shared_ptr<detail::LockAttempt> attempt_;
  std::uint64_t grant_ = 0;  // which grant of the attempt's node this lease is
  FencingToken token_;
};

}  // namespace zklock
