// zklock::LockObserver — what a Client's locks did, for metrics.
//
// Set ClientOptions::observer to an object of your own subclass; override
// the callbacks you need (the others do nothing). Every lock of that client
// (FairMutex, FairSharedMutex, MultiLock's members, StripedMutex's stripes)
// reports to it. Unset (the default), the library pays one null check per
// event: no allocation, no clock read, no string built.
//
// Threading: callbacks run on zklock's internal threads (the C client's
// completion thread, the client's timer or callback thread) and, for a few
// outcomes known at once, on the thread that acquires or releases. They may
// run concurrently from several threads, so the observer must be
// thread-safe (atomics, or a mutex of its own held briefly). They run while
// no zklock mutex is held (the lock shell's outbox, or the callback thread),
// yet they delay the event's other work: they must be cheap and must not
// block, call back into zklock synchronously or throw (an exception is
// caught and logged). `lock_path` is valid only during the call.
#pragma once

#include <chrono>
#include <cstdint>
#include <string_view>

#include "zklock/error.hpp"
#include "zklock/lease.hpp"

namespace zklock {

class LockObserver {
 public:
  using Duration = std::chrono::steady_clock::duration;

  virtual ~LockObserver() = default;

  // An acquisition began (blocking, timed, try_ or async; a re-take too).
  virtual void acquire_started(std::string_view /*lock_path*/) {}
  // It ended with a lease, `wait` after acquire_started. `retained`: a
  // local re-take of this client's idle retained node (no request at all)
  // rather than a full round through the queue.
  virtual void granted(std::string_view /*lock_path*/, Duration /*wait*/, bool /*retained*/) {}
  // It ended without one: `code` is the error the caller gets
  // (Errc::timeout for a try_acquire_for that ran out, Errc::cancelled, ...).
  virtual void failed(std::string_view /*lock_path*/, Duration /*wait*/, Errc /*code*/) {}
  // The holder released its lease after holding it for `held` (from the
  // grant to the release call). Not called for a lease that was lost.
  virtual void released(std::string_view /*lock_path*/, Duration /*held*/) {}
  // A held lease was lost (Lease::on_lost says when).
  virtual void lost(std::string_view /*lock_path*/, LossReason /*reason*/) {}
  // The session's validity bound passed without a committed write raising
  // it (client.hpp): every lease of the session counts as lost from now,
  // and each is reported to lost() as well. On the client's callback thread.
  virtual void validity_lapsed(std::int64_t /*session_id*/) {}
  // A waiter's server still lists a node of `lock_path` that the leader says
  // is gone: that server has diverged from the quorum (Client::
  // diverged_servers_seen; docs/operations.md says what to do). The waiter
  // goes on as if the node were gone. On the client's callback thread.
  virtual void diverged_server(std::string_view /*lock_path*/, std::string_view /*detail*/) {}
  // The session's connections kept closing before any answer for a whole
  // session timeout (Client::reconnect_loops_seen; docs/operations.md, "A
  // reconnect loop"): the client ends that session, as if it had expired,
  // and starts a new one. `cause`: what is known of why. On the client's
  // callback thread.
  virtual void reconnect_loop(std::int64_t /*session_id*/, std::string_view /*cause*/) {}
};

}  // namespace zklock
