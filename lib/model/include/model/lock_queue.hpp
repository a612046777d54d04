// Lock queues as the detector and the CLI see them, and the waits in them.
//
// A LockQueue is a snapshot of one lock path's zklock children (foreign
// children already dropped). analyze_queues() orders each queue and decides
// who holds and who waits with model/queue_order.hpp (the recipe's own
// rule: creation order, and the grant rule blocks()), and turns the waits
// into a WaitForGraph: an edge waiter -> blocker for every earlier node that
// blocks the waiter; hard when the blocker holds, soft when it waits.
//
// Only waits older than `min_wait` (by the waiting node's ctime) become
// edges, so ordinary hand-offs never look like deadlocks. Nodes ahead of an
// old waiter are older still (queues only grow at the tail), so filtering by
// the waiter's age never hides a blocker.
//
// Abandoned waits: a waiting node whose data states a timeout
// (gives_up_after_ms, docs/protocol.md) and whose ctime + that timeout +
// AnalyzeOptions::abandon_skew lies before now_ms waits for nothing: its
// owner gave up and could not delete it (disconnected). It gets no edge
// (so it can neither close a cycle nor be a victim's reason), while edges
// towards it stay: the nodes behind it do wait until it goes. Nodes without
// the field (no timeout, older clients) are never abandoned.
//
// Owners (one rule for the detector and the CLI): node data names the owner
// only when its owner id hashes to the owner key in the node's name
// (names_owner()); an owner key's owner is the smallest id so named by any
// of the key's nodes, and "owner-key:<16 hex>" (unknown_owner()) when none
// names one, so the graph can be built from names alone.
//
// Cost: a waiter gets one edge per distinct owner ahead of it, so a queue of
// n waiting owners costs O(n^2) edges; AnalyzeOptions::max_queue_edges caps
// the edges of one queue (the excess waiters are reported as truncated).
#pragma once

#include <algorithm>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "model/wait_for_graph.hpp"
#include "zklock/protocol/node_name.hpp"

namespace zklock::model {

struct QueueNode {
  std::string name;          // child name as listed ("w_<key>_<guid>_<seq>")
  Mode mode = Mode::exclusive;
  std::string owner_key;     // from the name
  std::int32_t sequence = 0;
  std::string owner;         // from node data; empty when unknown or invalid
  int priority = 0;          // from node data
  std::int64_t czxid = 0;    // 0 while the node's stat is unknown
  std::int64_t ctime_ms = 0;  // server time of creation; 0 while unknown
  std::int64_t gives_up_after_ms = 0;  // from node data; 0: no timeout stated (or unknown)
};

struct LockQueue {
  std::string path;               // the lock path
  std::vector<QueueNode> nodes;   // any order
};

// Builds a QueueNode from a child name; nullopt for foreign names.
std::optional<QueueNode> queue_node_from_name(std::string_view child_name);

struct AnalyzeOptions {
  std::int64_t now_ms = 0;                           // wall clock, ms since the epoch
  std::chrono::milliseconds min_wait{1000};
  std::size_t max_queue_edges = 1'000'000;
  // How far now_ms may run ahead of the server's clock (ctimes) before a
  // wait past its stated timeout is taken as abandoned (docs/detector.md).
  std::chrono::milliseconds abandon_skew{5000};
  // Which waits the graph keeps. `all`: every one (the CLI's graph, the
  // status page). `on_cycles`: only those between owners of one strongly
  // connected component, self-loops included; graph.cycles() is the same
  // as with `all` (it looks at no other edge), and a scan does not pay for
  // a long queue's n²/2 waits when no cycle runs through it.
  enum class Waits { all, on_cycles };
  Waits waits = Waits::all;
};

// Is `n`, if it waits, an abandoned wait at `now_ms` (see above)? False
// while its ctime or its timeout is unknown.
bool abandoned_wait(const QueueNode& n, std::int64_t now_ms, std::chrono::milliseconds skew) noexcept;

// What the detector knows about one node after analysis.
struct NodeInfo {
  std::string path;      // full path
  std::string lock;
  std::string owner;     // resolved owner id
  Mode mode = Mode::exclusive;
  bool holds = false;
  bool abandoned = false;  // waits, but abandoned_wait(): no edge leaves it
  int priority = 0;
  std::int64_t czxid = 0;
  std::int64_t ctime_ms = 0;
};

struct OwnerInfo {
  std::string owner_key;             // the key in this owner's node names
  std::vector<std::string> held;     // node paths this owner holds (in the analysed queues)
  std::vector<std::string> waiting;  // node paths this owner waits with
  // Nodes held alone in their queue and not listed in `held`
  // (analyze_snapshot() only; LockIndex::lone_nodes() names them).
  std::size_t held_alone = 0;

  std::size_t held_count() const noexcept { return held.size() + held_alone; }
};

// The head of a queue with waiters: its first node in creation order (it
// holds), and the nodes queued behind it. The tree does not say whether the
// head uses the lock or is stuck without taking it: both look
// the same. since_ms() is when the tree shows the head began keeping
// others waiting: the later of its own creation and its first waiter's. It
// is an upper bound on the truth, since a node that queued before it
// reached the head is counted from its creation; the detector and the CLI
// tighten it with what they know beyond one snapshot (docs/detector.md,
// docs/cli.md).
struct QueueHead {
  std::string lock;
  std::string node;   // the head's full path
  std::string owner;  // resolved owner id
  Mode mode = Mode::exclusive;
  std::int64_t czxid = 0;
  std::int64_t ctime_ms = 0;               // the head's; 0 while unknown
  std::int64_t first_waiter_ctime_ms = 0;  // the oldest waiter's; 0 while unknown
  std::size_t holders = 0, waiters = 0;    // waiters >= 1

  bool known() const noexcept { return ctime_ms != 0 && first_waiter_ctime_ms != 0; }
  // REQUIRES: known().
  std::int64_t since_ms() const noexcept { return std::max(ctime_ms, first_waiter_ctime_ms); }
};

struct WaitAnalysis {
  WaitForGraph graph;
  // One per queue with at least one waiter (analyze_snapshot(): the lone
  // queues have none), in no particular order.
  std::vector<QueueHead> heads;
  // analyze_queues(): every node and every owner. analyze_snapshot(): the
  // nodes of contended queues and the owners with a node in one.
  std::unordered_map<std::string, NodeInfo> nodes;  // by full path
  std::map<std::string, OwnerInfo> owners;          // by owner id
  std::size_t locks = 0;         // non-empty queues
  std::size_t holders = 0;       // nodes that hold
  std::size_t waiters = 0;       // nodes that wait (any age), abandoned ones included
  std::size_t abandoned = 0;     // waiting nodes that are abandoned waits (no edges)
  std::int64_t oldest_wait_ms = 0;  // age of the oldest waiting node (0: none)
  std::size_t truncated_waiters = 0;  // waiters whose edges were cut by max_queue_edges
};

WaitAnalysis analyze_queues(const std::vector<LockQueue>& queues, const AnalyzeOptions& options);

// What a scan knows about one owner key beyond the contended queues.
struct KeyFacts {
  std::string owner;            // smallest valid owner id over all the key's nodes; empty: none
  std::size_t held_alone = 0;   // the key's nodes that are alone in their queue
};

// The scan's view of the tree (LockIndex::snapshot()): only queues with two
// or more nodes can hold a wait; lone queues are summarised.
struct QueueSnapshot {
  std::vector<LockQueue> contended;                // every queue with >= 2 nodes
  std::unordered_map<std::string, KeyFacts> keys;  // every owner key with a node in `contended`
  std::size_t lone_queues = 0;                     // queues with exactly one node (it holds)
};

// The same graph, cycles, counts (locks, holders, waiters, oldest wait) and
// per-owner held counts (OwnerInfo::held_count()) as analyze_queues() over
// every queue the snapshot was taken from, at a cost proportional to the
// contended queues.
WaitAnalysis analyze_snapshot(const QueueSnapshot& snapshot, const AnalyzeOptions& options);

// Sorts a queue into creation order: model::sort_by_creation() (suffix where
// unambiguous, czxid otherwise; an unknown czxid sorts last). True when the
// order is exact (see there).
bool sort_queue(std::vector<QueueNode>& nodes);

// Does node data recording `owner` name the owner of a node whose name
// carries owner key `key`? Only an owner id that hashes to the key does.
bool names_owner(std::string_view owner, std::string_view key);
// "owner-key:<key>": the owner of a key no node's data names.
std::string unknown_owner(std::string_view key);

// "<lock>/<name>"
std::string node_path(const std::string& lock, const std::string& name);

}  // namespace zklock::model
