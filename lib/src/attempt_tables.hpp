// The recipe shell's per-client tables: live attempts by owner, listing batches, and what each lock was last seen as.
//
// One per Client::Impl (Client::Impl::attempt_tables), never shared between
// clients: only one session's own threads contend for its lock, and a
// thread preempted while holding it stalls no other client (in the
// `services` benchmark, 300 sessions in one process on two cores, a
// process-wide table put the re-takes' p99 at 180–300 ms; per client it is
// 21–57 ms).
//
// Lock order: `mu` is a leaf. It is taken under an attempt's lock and under
// a batch's lock, and nothing is locked while it is held.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace zklock::detail {

class LockAttempt;
struct ListingBatch;
using ListingKey = std::pair<std::uint64_t, std::string>;  // a batch's: the session (epoch) and the lock path

struct AttemptTables {
  std::mutex mu;
  // "<lock path>\n<owner>" of every owner with a live attempt: a second
  // request by the same owner for the same lock would wait for itself.
  std::set<std::string> live;  // GUARDED_BY(mu)
  // Per lock path: did the last exclusive acquisition find others (seen_before)?
  std::unordered_map<std::string, bool> seen;  // GUARDED_BY(mu)
  // Per session and lock path: the batch with a listing in flight, if any.
  std::map<ListingKey, std::shared_ptr<ListingBatch>> batches;  // GUARDED_BY(mu)
  // Per owner: an owner that may wait keeps no idle node (lock_attempt.hpp,
  // invariant 6). Empty entries stay (no allocation per acquisition) and
  // are forgotten past 4,096 owners.
  struct Owner {
    std::vector<std::weak_ptr<LockAttempt>> idle;  // its retained idle attempts
    int acquiring = 0;                             // its acquisitions under way (not re-takes)
  };
  std::unordered_map<std::string, Owner> owners;  // GUARDED_BY(mu)
};

}  // namespace zklock::detail
