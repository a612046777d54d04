// Listings batched per client, session and lock (listing_batch.cpp says why and how).
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "zklock/client.hpp"

namespace zklock::detail {

class LockAttempt;

// One attempt's listing in a batch: its tag, and whether it asked for the
// children watch (list_watch; the listing's watch is then shared).
struct ListingWant {
  std::weak_ptr<LockAttempt> attempt;
  std::uint64_t tag = 0;
  bool watch = false;
};

// Listings are batched per session and lock, with at most one in flight,
// watched or not (list_batched).
struct ListingBatch {
  explicit ListingBatch(std::uint64_t session) : epoch(session) {}
  const std::uint64_t epoch;  // the session its listings are pinned to
  std::mutex mu;
  std::vector<ListingWant> waiting;  // GUARDED_BY(mu)
  bool inflight = false;             // GUARDED_BY(mu)
};

// Lists `path` on session `epoch` for `want`, with the children watch if it
// asks: now, or behind the listing in flight, sharing its successor. The
// answer reaches the attempt as LockAttempt::on_listing, the watch as
// LockAttempt::on_children_changed, each with the want's tag.
void list_batched(Client::Impl* impl, const std::string& path, std::uint64_t epoch, ListingWant want);

}  // namespace zklock::detail
