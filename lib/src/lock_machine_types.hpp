// Internal: the lock machine's vocabulary — events in, requests and outcomes out, its configuration.
//
// The contract these types carry is lock_machine.hpp's.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "zklock/error.hpp"
#include "zklock/lease.hpp"
#include "zklock/options.hpp"
#include "zklock/protocol/node_name.hpp"

namespace zklock::detail {

// The outcome of one request, as the recipe needs to tell them apart.
enum class Rc {
  ok,
  no_node,          // ZNONODE: the only answer that means "gone"
  node_exists,
  connection_loss,  // ZCONNECTIONLOSS / ZOPERATIONTIMEOUT: the outcome is unknown
  session_expired,  // the session is over (or the request could not be sent on it)
  error,            // anything else; `detail` says what
};

struct NodeStat {
  Rc rc = Rc::ok;
  std::int64_t czxid = 0;
};

// One listing of a lock, parsed and put in suffix order once: a batched
// get_children serves many machines of one client, and each must not pay
// O(queue) to parse it again (a burst of N local waiters would cost N^2).
struct QueueEntry {
  protocol::LockNodeName node;
  std::int64_t czxid = 0;  // 0: not known
};
struct Listing {
  std::vector<QueueEntry> nodes;  // the zklock children (foreign ones dropped); in creation order when `exact`
  bool exact = false;             // the suffixes alone give the creation order (model/queue_order.hpp)
  // The first 24 GUID digits (one attempt's creates) → indices, ascending.
  std::unordered_map<std::string, std::vector<std::size_t>> by_attempt;
};
std::shared_ptr<const Listing> parse_listing(const std::vector<std::string>& children);

struct MachineEvent {
  enum class Kind {
    // answers
    created,          // create: rc; name (child name) and czxid when ok
    parents_made,     // make_parents: rc (node_exists counts as ok)
    listed,           // list: rc; children
    stats_read,       // read_stats: stats, one per name, in order
    blocker_checked,  // watch_blocker: rc (ok: the node exists, watch set; no_node: gone)
    marker_read,      // read_marker: rc; data
    own_checked,      // watch_own: rc
    record_read,      // read_record: rc; data
    removed,          // remove / remove_extra: rc
    blocker_probed,   // probe_blocker: rc (no_node: the leader has no such node; anything else: nothing proven)
    // watch notifications (tag of the request that set the watch)
    blocker_deleted,
    own_deleted,
    own_changed,       // our node's data changed (someone else wrote it): the watch is spent
    children_changed,  // list_watch's children watch fired
    // session (epoch)
    disconnected,
    reconnected,       // the same session is back
    expired,           // the session is over; its ephemeral nodes are gone
    validity_expired,  // disconnected past the client's validity bound
    validity_proven,   // the session's bound was raised (within_bound says whether it covers now)
    // the shell's clock: the attempt has waited on the same blocker for the
    // waiting watchdog's period (ClientOptions::wait_check), without news
    watchdog,
    // the user
    cancel,   // errc (timeout / cancelled), detail
    release,  // the lease's release; may_retain
    retake,       // retained: the same owner asks for the lock again; within_bound
    retain_over,  // retained: the retain time ran out, or the retention is given up
  };
  Kind kind;
  std::uint64_t tag = 0;
  std::uint64_t epoch = 0;
  Rc rc = Rc::ok;
  std::string detail;                  // rc == error: what failed; cancel: message
  std::string name;                    // created
  std::int64_t czxid = 0;              // created
  // Every event: the session's validity bound is still ahead of the shell's
  // clock (now < Client::valid_until() on the attempt's session). Time stays
  // out of the machine: the shell reads the clock, the machine decides (a
  // grant is handed out only in a step that says so, invariant 9; a re-take
  // is local only then, invariant 5).
  bool within_bound = false;
  // Every event: the session's settings can prove no bound at all; a grant
  // is handed out anyway (valid() stays false, as documented). Never a re-take.
  bool no_bound = false;
  // release: the node may be kept idle (invariant 5) as far as the owner is
  // concerned: a mutex remains to re-take it, and the owner has no
  // acquisition under way in this client (lock_attempt.hpp, invariant 6).
  bool may_retain = false;
  // retake: a listing answered within the waiting watchdog's period (the
  // shell's clock again) confirmed the retained node's existence. Past it,
  // a quiet children watch proves nothing: its notification may be lost.
  bool confirmed = false;
  // retake: the request's stop was requested before it began; the re-take
  // is void (the caller's new acquisition then fails as cancelled).
  bool cancelled = false;
  std::vector<std::string> children;   // listed (parsed by the machine when `listing` is null)
  std::shared_ptr<const Listing> listing;  // listed: the parsed listing, shared
  std::vector<NodeStat> stats;         // stats_read
  std::string data;                    // marker_read, record_read
  Errc errc = Errc::cancelled;         // cancel; rc == error: the ZooKeeper code

  // An answer to a request (not a notification, a session or a user event).
  bool is_answer() const;
};

// A request for the shell to send; its answer comes back as the event named
// alongside (the same tag).
struct MachineRequest {
  enum class Kind {
    create,        // create EPHEMERAL_SEQUENTIAL <lock>/<prefix> with the node data; name: the GUID → created
    make_parents,  // create the lock path and its ancestors as containers → parents_made
    list,          // getChildren(<lock>), no watch (the shell may batch it) → listed
    list_watch,    // getChildren(<lock>) with a children watch (the shell may batch it: the watch then fires to each)
    read_stats,    // exists(<lock>/<name>) for each of `names`, no watch, pipelined → stats_read
    watch_blocker, // getData(<lock>/<name>) with a watch: the deletion watch → blocker_checked, blocker_deleted
    read_marker,   // getData(<lock>): the hand-off marker → marker_read
    watch_own,     // getData(<lock>/<name>) with a watch: our own node → own_checked, own_deleted, own_changed
    read_record,   // getData(/zklock/revocations/<name>) → record_read
    remove,        // delete <lock>/<name>; with_marker: in one multi with setData(<lock>, name) → removed
    remove_extra,  // delete <lock>/<name>: a duplicate of ours (same GUID), or the write barrier → removed
    // setData(<lock>/<name>) with a version no node can have: the leader
    // answers it from its own tree (no_node: gone; a bad version: it exists),
    // and it changes nothing → blocker_probed
    probe_blocker,
  };
  Kind kind;
  std::uint64_t tag = 0;
  std::string name;
  std::vector<std::string> names;
  bool with_marker = false;
};

// What the attempt reports to its lease or caller.
struct MachineOutcome {
  enum class Kind {
    granted,      // token: the czxid of the granted node (a re-take's too: the same node); ordinal: which lease
    failed,       // errc, message
    lost,         // reason, message
    released,     // the release finished: the node is gone, or retained idle (the lease is over)
    retake_void,  // the re-take cannot be local (message: why); queue anew. The node is being released.
    // Our server still lists a node that the leader says is gone (message:
    // both views): that server has diverged from the quorum.
    diverged,
    notice,       // something worth a log line (message), reported to no lease
  };
  Kind kind;
  std::int64_t token = 0;
  std::int64_t ordinal = 0;  // granted: 0 for the node's first grant, n for its n-th re-take
  Errc errc = Errc::system_error;
  LossReason reason = LossReason::revoked;
  std::string message;
};

// One step's output. The shell sends `requests` in order, then reports
// `outcomes` in order: a void re-take's remove leaves before the caller's
// new create.
struct MachineCommands {
  std::vector<MachineRequest> requests;
  std::vector<MachineOutcome> outcomes;
};

// Who an attempt acts for, as its node's data says: only the same holder
// re-takes a retained node.
struct Holder {
  std::string owner;
  int priority = 0;
  std::string description;
  LossPolicy policy = LossPolicy::tolerant;
  bool operator==(const Holder&) const = default;
};

// What this client's previous exclusive acquisition of the lock found when
// it ended (the shell remembers it per client and lock).
enum class LockHistory { unknown, free, contended };

struct MachineConfig {
  Mode mode = Mode::exclusive;
  std::string guid;             // 32 random hex digits; the first 24 mark our nodes' GUIDs
  Holder holder;
  std::uint64_t epoch = 0;      // the session the attempt runs on
  std::string lock_path;        // for messages only
  bool retain = false;          // a release may keep the node idle for a re-take; exclusive only (LockAttempt::start)
  LockHistory history = LockHistory::unknown;
};

}  // namespace zklock::detail
