// Status: what the detector's status page (GET /) and GET /api/state show —
// the locks with waiters, the wait-for graph as a picture, the cycles and the
// last revocations (docs/detector.md, "Status page").
//
// Each scan hands the board a StatusData: a bounded summary built from that
// scan's snapshot analysed with no min-wait (every current wait, not only
// those old enough to act on), so the page shows what is true within one
// scan interval. The board renders JSON, SVG (Graphviz) and HTML only when a
// request comes and the data changed since the last rendering, so a replica
// nobody looks at pays for the summary alone, and a request costs a copy of
// strings rendered at most once per scan.
//
// Bounds (what keeps a request fast however large the tree): at most
// kMaxLocks locks with waiters (most waiters first; the rest counted), at
// most kMaxWaitersListed waiters listed per lock (the oldest; all counted),
// at most kMaxWaits waits listed and drawn (cycle waits first). Locks held
// alone are counted, never listed: they are not in the scan's snapshot.
//
// Every value shown in HTML is escaped (html_escape); Graphviz escapes the
// labels in its SVG.
//
// Thread-safety: StatusBoard may be used from any thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "model/lock_queue.hpp"
#include "zklock/protocol/revocation.hpp"

namespace zklock::detector {

inline constexpr std::size_t kMaxLocks = 200;
inline constexpr std::size_t kMaxWaitersListed = 20;
inline constexpr std::size_t kMaxWaits = 400;
inline constexpr std::size_t kMaxRevocations = 20;

struct StatusNode {
  std::string owner, node;
  Mode mode = Mode::exclusive;
  std::int64_t age_ms = 0;  // since the node's creation (0 while its stat is unknown)
};

struct StatusLock {
  std::string path;
  std::size_t depth = 0;              // nodes in the queue
  std::vector<StatusNode> holders;    // every holder
  std::vector<StatusNode> waiters;    // the oldest kMaxWaitersListed
  std::size_t waiters_total = 0;
  std::int64_t oldest_wait_ms = 0;
};

struct StatusRevocation {
  std::string record;  // its znode path
  protocol::RevocationRecord r;
};

struct StatusData {
  std::string root, detector_id;
  bool leader = false;
  std::int64_t time_ms = 0;       // the scan's wall clock
  std::uint64_t scan = 0;         // the scan's number (the page refreshes when it changes)
  std::int64_t interval_ms = 0, min_wait_ms = 0;
  std::size_t locks_total = 0, holders = 0, waiters = 0, held_alone = 0;
  std::vector<StatusLock> locks;  // with waiters, most waiters first
  std::size_t locks_left_out = 0;
  std::vector<model::Wait> waits;  // of the listed locks, plus every cycle's
  std::size_t waits_left_out = 0;
  std::vector<model::Cycle> cycles;
  std::vector<StatusRevocation> revocations;  // newest first, at most kMaxRevocations
  bool revocations_read = false;  // false until read once (they are read only while someone looks)
};

// The bounded summary of one analysed snapshot (analysis with no min-wait).
// `revocations` is copied in as given.
StatusData build_status(const model::WaitAnalysis& analysis, std::size_t lone_queues, std::int64_t now_ms);

// &, <, >, " and ' as entities.
std::string html_escape(std::string_view s);

// The documents of one StatusData (status.cpp, status_page.cpp).
std::string status_json(const StatusData& d);
std::string status_html(const StatusData& d, const std::string& svg, const std::string& svg_error);

class StatusBoard {
 public:
  void update(StatusData data);
  // The documents for GET /api/state and GET /; each call counts as a look.
  std::string json();
  std::string html();
  // True when a document was asked for within `window_ms` of `now_ms` (the
  // daemon reads revocation records from ZooKeeper only then).
  bool looked_at_since(std::int64_t now_ms, std::int64_t window_ms) const;

 private:
  std::int64_t look();              // REQUIRES: mu_ held; records a look, returns its time
  const StatusData& data() const;   // REQUIRES: mu_ held

  mutable std::mutex mu_;
  // All GUARDED_BY(mu_). Each document is rendered at most once per update
  // (its *_version_ says which), the SVG at most once per distinct DOT.
  std::shared_ptr<const StatusData> data_;
  std::uint64_t version_ = 0, json_version_ = ~0ULL, html_version_ = ~0ULL;  // ~0: never rendered
  std::string json_, html_, dot_, svg_, svg_error_;
  std::int64_t last_look_ms_ = 0;
};

}  // namespace zklock::detector
