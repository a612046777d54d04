// Listings batched per client, session and lock: one get_children serves every attempt that asked meanwhile.
//
// At most one listing per batch is in flight: one needed meanwhile waits
// for its answer, and then one get_children serves every attempt that enrolled meanwhile (one
// session's requests execute in order, so it lists all their nodes, each
// issued after that attempt's create). An uncontended acquire still costs
// one round trip; N local waiters relisting together cost one listing, not
// N listings of a queue of N (O(N^2) bytes from the server and in memory).
//
// Watched listings (list_watch) are batched too: the listing carries the
// children watch if any attempt it serves asked for one, and the watch's
// notification goes to each of those attempts with its own tag. For each it
// is what its own list_watch would have been: issued after its create,
// armed by the listing it is answered with, fired by the next change of the
// children after that listing. A batch serves the attempts of one session
// only, and its listing is pinned to that session: an attempt's answers all
// come from the session its node belongs to (lock_attempt.hpp, invariant 2).
#include <memory>
#include <mutex>
#include <utility>

#include "attempt_tables.hpp"
#include "listing_batch.hpp"
#include "lock_attempt.hpp"

namespace zklock::detail {
namespace {

std::shared_ptr<ListingBatch> batch_for(Client::Impl* impl, const std::string& path, std::uint64_t epoch) {
  auto& t = *impl->attempt_tables;
  std::lock_guard lk(t.mu);
  auto& b = t.batches[ListingKey{epoch, path}];
  if (!b) b = std::make_shared<ListingBatch>(epoch);
  return b;
}

// The children watch of a shared listing: its notification, to every attempt
// served that asked for the watch.
Watcher shared_children_watch(const std::vector<ListingWant>& served) {
  auto watchers = std::make_shared<std::vector<ListingWant>>();
  for (const auto& w : served) {
    if (w.watch) watchers->push_back(w);
  }
  if (watchers->empty()) return nullptr;
  return [watchers](const WatchEvent&) {
    for (const auto& w : *watchers) {
      if (auto a = w.attempt.lock()) a->on_children_changed(w.tag);
    }
  };
}

// REQUIRES batch->mu. Its answer sends the next listing for whoever enrolled meanwhile.
void issue_listing(Client::Impl* impl, std::shared_ptr<ListingBatch> batch, std::string path,
                   std::vector<ListingWant> served) {
  batch->inflight = true;
  Watcher watch = shared_children_watch(served);
  impl->get_children(
      path, std::move(watch),
      [impl, path, batch, served = std::move(served)](Status st, std::vector<std::string> children) {
    {
      std::lock_guard lk(batch->mu);
      batch->inflight = false;
      if (!batch->waiting.empty()) {
        issue_listing(impl, batch, path, std::exchange(batch->waiting, {}));
      } else {
        auto& t = *impl->attempt_tables;
        std::lock_guard lk2(t.mu);
        auto it = t.batches.find(ListingKey{batch->epoch, path});
        if (it != t.batches.end() && it->second == batch) t.batches.erase(it);
      }
    }
    // Parsed and put in order once for everyone it serves.
    const auto listing = parse_listing(st.ok() ? children : std::vector<std::string>{});
    children = {};
    for (const auto& w : served) {
      if (auto a = w.attempt.lock()) a->on_listing(w.tag, st, listing);
    }
      },
      batch->epoch);
}

}  // namespace

void list_batched(Client::Impl* impl, const std::string& path, std::uint64_t epoch, ListingWant want) {
  auto batch = batch_for(impl, path, epoch);
  std::lock_guard lk(batch->mu);
  if (!batch->inflight) {
    issue_listing(impl, batch, path, {std::move(want)});
  } else {
    batch->waiting.push_back(std::move(want));
  }
}

}  // namespace zklock::detail
