// Internal: the sessions behind one Client, and the watch budget that decides how many there are.
//
// Why more than one. On every reconnect the C client re-arms all of a
// session's watches in one SetWatches request, and a server closes any
// connection whose request is longer than its jute.maxbuffer (1 MB by
// default). Past that size a session can never reconnect: each attempt is
// closed, each re-validates the session, so it never expires either, and
// its nodes stay for good. The C client in Debian 12 (3.8.0) does not split
// the request. So zklock keeps every session's watches under a budget
// (ClientOptions::watch_budget_bytes) and opens more sessions behind the
// same Client when the lock attempts under way need more.
//
// What is counted. A lock attempt watches at most two nodes of its lock at
// once (its own and the one it waits behind) and the lock's children; in
// SetWatches each path costs 4 bytes of length plus its bytes as the server
// sees them (with the chroot). An attempt reserves that much on one session
// for as long as it lives (its node, its lease, a retained idle node) and
// every request and watch of it goes to that session, so a node stays on
// the session that created it (lock_attempt.hpp, invariant 2). The count
// is an upper bound: two attempts watching one path reserve it twice.
//
// Invariants:
//  (1) A session's seated bytes never exceed the budget, except for one
//      attempt alone on a fresh session (a path longer than the budget).
//  (2) Sessions are added, never removed, while the Client lives; the first
//      (the Client's own) is tried first, then the others in order of birth.
//  (3) Every session behind a Client shares its attempt tables (one owner
//      waits for a lock once in the process, whichever session serves it),
//      its options and server settings; each has its own epochs (the
//      shard's index in the upper 32 bits), so a session of one never
//      matches a pin of another.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <string_view>
#include <vector>

#include "client_impl.hpp"

namespace zklock::detail {

// The watch bytes a lock attempt on `lock_path` reserves (see above).
std::size_t attempt_watch_bytes(const ClientOptions& options, std::string_view lock_path);

// A lock attempt's watch bytes seated on one session, given back when it
// goes. Also what keeps that session's Impl alive for the attempt.
class Seat {
 public:
  Seat(std::shared_ptr<Client::Impl> session, std::size_t bytes) : session_(std::move(session)), bytes_(bytes) {}
  Seat(Seat&& o) noexcept : session_(std::move(o.session_)), bytes_(o.bytes_) {}
  Seat& operator=(Seat&&) = delete;
  Seat(const Seat&) = delete;
  Seat& operator=(const Seat&) = delete;
  ~Seat() {
    if (session_) session_->unseat(bytes_);
  }
  const std::shared_ptr<Client::Impl>& session() const noexcept { return session_; }

 private:
  std::shared_ptr<Client::Impl> session_;
  std::size_t bytes_;
};

// The sessions beyond a Client's first. Owned by the first session's Impl.
class SessionShards {
 public:
  // The session a new attempt of `bytes` goes to, with the bytes seated on
  // it. Opens a session when none has
  // room: that waits for it, up to ClientOptions::connect_timeout, and
  // throws Error (connect_timeout...) as Client's constructor does.
  Seat seat(const std::shared_ptr<Client::Impl>& primary, std::size_t bytes);
  // Every session but the first, in order of birth.
  std::vector<std::shared_ptr<Client::Impl>> all() const;
  // Closes them all (Client's destructor). Idempotent.
  void shutdown();

 private:
  mutable std::mutex mu_;  // held while a session is opened: one opens at a time
  std::vector<std::shared_ptr<Client::Impl>> shards_;  // GUARDED_BY(mu_)
  bool closed_ = false;                                  // GUARDED_BY(mu_)
};

}  // namespace zklock::detail
