// The recipe shell's per-client tables: each owner's attempts, what each lock was last seen as, listing batches.
//
// One per Client::Impl (Client::Impl::attempt_tables), never shared between
// clients: only one session's own threads contend for its lock, and a
// thread preempted while holding it stalls no other client (in the
// `services` benchmark, 300 sessions in one process on two cores, a
// process-wide table put the re-takes' p99 at 180–300 ms; per client it is
// 21–57 ms).
//
// Lock order: `mu` and the tables' own locks are leaves. They are taken
// under an attempt's lock (`mu` under a batch's too), and nothing is locked
// while one is held.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "lock_history.hpp"
#include "owner_table.hpp"

namespace zklock::detail {

class LockAttempt;
struct ListingBatch;
using ListingKey = std::pair<std::uint64_t, std::string>;  // a batch's: the session (epoch) and the lock path

struct AttemptTables {
  OwnerTable<LockAttempt> owners;  // each owner's live attempts, acquisitions and idle nodes
  LockHistoryTable history;        // MachineConfig::history, per lock
  std::mutex mu;
  // Per session and lock path: the batch with a listing in flight, if any.
  std::map<ListingKey, std::shared_ptr<ListingBatch>> batches;  // GUARDED_BY(mu)
};

}  // namespace zklock::detail
