// Reading the lock tree for the CLI: lock paths under a root, each lock's
// children with their stat and node data, in grant order. Read-only: no
// node is created, no watch is left behind.
//
// Lock nodes are read with pipelined asynchronous gets (one round trip of
// latency per lock, not per node). A node that vanishes between the listing
// and the read is dropped: the snapshot is what was there when read.
//
// Ordering and holder/waiter decisions are not made here: they come from
// the detector's analyze_queues() (detector/lock_queue.hpp), so the CLI and
// the detector always agree on who holds and who waits.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "detector/lock_queue.hpp"
#include "zklock/client.hpp"
#include "zklock/node_data.hpp"
#include "zklock/node_name.hpp"

namespace zklock::cli {

struct NodeView {
  std::string name;                     // child name as listed
  std::string path;                     // full path
  std::optional<LockNodeName> parsed;   // nullopt: a foreign child
  std::optional<NodeData> data;         // nullopt: missing or malformed data
  Stat stat;
};

struct LockView {
  std::string path;
  std::vector<NodeView> nodes;    // zklock nodes, in grant order
  std::vector<NodeView> foreign;  // children that are not zklock nodes, by name
};

// One lock. Throws Error(no_node) when the lock path does not exist.
LockView read_lock(Client& client, const std::string& lock_path);

// Every lock path at any depth below `root` (a node with zklock children, or
// an empty leaf: an idle lock parent), in path order. A missing root is an
// empty tree. /zookeeper and /zklock are skipped.
std::vector<LockView> read_tree(Client& client, const std::string& root);

// The detector's view of the snapshot.
detector::LockQueue to_queue(const LockView& lock);
detector::WaitAnalysis analyze(const std::vector<LockView>& locks, std::chrono::milliseconds min_wait,
                               std::int64_t now_ms);

// The owner a node records (data), or "owner-key:<key>" when unknown — the
// same rule analyze_queues() applies.
std::string owner_of(const NodeView& node);

// The --json shapes of one owner-to-owner wait and of one cycle (its text,
// owners and waits), shared by `zklock cycles` and `zklock graph`.
nlohmann::json wait_json(const detector::Wait& w);
nlohmann::json cycle_json(const detector::Cycle& c);

// The ensemble id at /zklock/ensemble-id without creating it (nullopt when
// absent: no lock was ever taken on this ensemble).
std::optional<std::string> read_ensemble_id(Client& client);

}  // namespace zklock::cli
