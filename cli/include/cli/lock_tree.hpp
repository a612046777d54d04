// Reading the lock tree for the CLI: lock paths under a root, each lock's
// children with their stat and node data, in grant order. Read-only: no
// node is created, no watch is left behind.
//
// Lock nodes are read with pipelined asynchronous gets (one round trip of
// latency per lock, not per node). A node that vanishes between the listing
// and the read is dropped: the snapshot is what was there when read.
//
// Ordering, holder/waiter and owner decisions are not made here: they come
// from the queue model shared with the detector (model/queue_order.hpp,
// model/lock_queue.hpp), so the CLI and the detector always agree on who
// holds, who waits and who owns a node.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/lock_queue.hpp"
#include "zklock/client.hpp"
#include "zklock/protocol/node_data.hpp"
#include "zklock/protocol/node_name.hpp"

namespace zklock::cli {

struct NodeView {
  std::string name;                     // child name as listed
  std::string path;                     // full path
  std::optional<protocol::LockNodeName> parsed;   // nullopt: a foreign child
  std::optional<protocol::NodeData> data;         // nullopt: missing or malformed data
  Stat stat;
};

struct LockView {
  std::string path;
  std::vector<NodeView> nodes;    // zklock nodes, in grant order
  std::vector<NodeView> foreign;  // children that are not zklock nodes, by name
};

// One lock. Throws Error(no_node) when the lock path does not exist.
LockView read_lock(Client& client, const std::string& lock_path);
// read_lock(), a missing lock reported as CliError(exit_code::no_such, missing).
LockView read_lock_or_exit(Client& client, const std::string& lock_path, const std::string& missing);

// A part of the tree these credentials may not read (ZooKeeper answered
// NOAUTH): a directory whose children cannot be listed, or a lock one of
// whose nodes cannot be read. It is reported, not guessed at: an unreadable
// lock is left out whole, since a missing node could change who holds.
struct Unreadable {
  std::string path;
  std::string error;   // errc_name(): "no_auth"
  std::string reason;  // one line: "no permission to list its children (NOAUTH)"
};

struct TreeView {
  std::vector<LockView> locks;          // the readable locks, in path order
  std::vector<Unreadable> unreadable;   // in path order; empty: the view is complete
  bool complete() const noexcept { return unreadable.empty(); }
};

// Every lock path at any depth below `root` (a node with zklock children, or
// an empty leaf: an idle lock parent), in path order. A missing root is an
// empty tree. /zookeeper and /zklock are skipped. NOAUTH on a directory or a
// lock node makes that part Unreadable and the walk goes on; any other
// error (connection loss...) is thrown.
TreeView read_tree(Client& client, const std::string& root);

// How ls, cycles and graph show a partial view. JSON: sets "complete"
// (false when anything was unreadable) and "unreadable" ([{path, error,
// reason}]) on `j`. Text: one "unreadable: PATH: REASON" line each.
void add_unreadable_json(nlohmann::json& j, const TreeView& tree);
std::string unreadable_text(const TreeView& tree);
// For text output: one warning line on stderr when the view is partial
// ("zklock: warning: partial view: 1 path could not be read").
void warn_if_partial(const TreeView& tree);

// The queue model's view of the snapshot (the detector's analysis).
model::LockQueue to_queue(const LockView& lock);
model::WaitAnalysis analyze(const std::vector<LockView>& locks, std::chrono::milliseconds min_wait,
                               std::int64_t now_ms);

// The ensemble id (protocol::kEnsembleIdPath) without creating it (nullopt when
// absent: no lock was ever taken on this ensemble).
std::optional<std::string> read_ensemble_id(Client& client);

}  // namespace zklock::cli
