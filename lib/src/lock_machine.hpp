// Internal: the lock recipe as a pure state machine, one acquisition of one lock node from create to release.
//
// Events in (answers to the commands it issued, watch notifications, session
// changes, the user's cancel and release), commands out (requests to send,
// and outcomes to report). No threads, no clocks, no ZooKeeper calls:
// lock_attempt.hpp is the shell that executes commands with the C client,
// and tests/sim drives thousands of machines against a model of ZooKeeper.
// docs/design.md gives the argument. The code: lock_machine.cpp (start, the
// dispatch, outcomes), lock_machine_acquire.cpp (up to the grant),
// lock_machine_hold.cpp (after it, and cleanup).
//
// Contract with the driver:
//  - Every request command carries a fresh `tag`; its answer comes back as
//    exactly one event with that tag. A watch notification carries the tag of
//    the request that set the watch. The machine drops answers it no longer
//    waits for (their tag is stale).
//  - Requests are sent in the order the commands are returned, on the
//    session the machine was started on (`epoch`); answers of one session
//    arrive in request order. A request the driver cannot send on that
//    session is answered with Rc::session_expired.
//  - Session events carry the session's epoch; the machine ignores other
//    sessions' events.
//
// Invariants (checked by tests/sim after every step):
//  (1) At most one outcome: `granted` or `failed`, once.
//  (2) `lost` is reported at most once, and only after `granted`.
//  (3) The hand-off marker is written only by the release of a node that was
//      granted, in the same multi that deletes it (remove.with_marker); and
//      by every such release unless the armed children watch shows that
//      nobody queued since a listing that showed us alone (nobody_queued).
//  (4) A node is granted only when a listing issued after our create, ordered
//      exactly (model/queue_order.hpp), shows nothing ahead of it that blocks
//      it, or when the one blocker that listing showed is proven gone.
//  (5) Retained leases (config.retain): a release keeps the node only when
//      a children watch is armed and has not fired, and the listing that set
//      it and every later one showed no other node. (A re-take lists without
//      a watch while one is armed: one per lock, not one per re-take.)
//      A re-take grants only when its setData
//      (expected version) succeeded and the listing behind it shows no node
//      but ours; its token is that setData's mzxid. Otherwise the retention
//      ends with the usual release (delete + marker) and `retake_void`.
//  (6) While our node exists and we wait or hold, its deletion is seen: an
//      exists watch on it is armed, or the children watch of the latest
//      listing (one issued after our create, so showing our node unless it
//      is gone) is armed and has not fired. When that watch fires, could not
//      be set, or shows that we must wait, the exists watch is armed then
//      (cover_own). So an acquisition that finds the lock free with a watched
//      listing sends no request for its own node.
#pragma once

#include <cstdint>
#include <map>
#include <unordered_map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
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
  LockNodeName node;
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
    blocker_checked,  // watch_blocker: rc (ok: exists, watch set; no_node: gone)
    marker_read,      // read_marker: rc; data
    own_checked,      // watch_own: rc
    record_read,      // read_record: rc; data
    removed,          // remove / remove_extra: rc
    touched,          // touch: rc; mzxid and version when ok
    // watch notifications (tag of the request that set the watch)
    blocker_deleted,
    own_deleted,
    own_changed,       // our node's data changed (our own re-take's setData)
    children_changed,  // list_watch's children watch fired
    // session (epoch)
    disconnected,
    reconnected,       // the same session is back
    expired,           // the session is over; its ephemeral nodes are gone
    validity_expired,  // disconnected past the client's validity bound
    // the user
    cancel,   // errc (timeout / cancelled), detail
    release,  // the lease's release
    retake,       // retained: the same owner asks for the lock again
    retain_over,  // retained: the retain time ran out, or the retention is given up
  };
  Kind kind;
  std::uint64_t tag = 0;
  std::uint64_t epoch = 0;
  Rc rc = Rc::ok;
  std::string detail;                  // rc == error: what failed; cancel: message
  std::string name;                    // created
  std::int64_t czxid = 0;              // created
  std::int64_t mzxid = 0;              // touched
  std::int32_t version = 0;            // touched: the node's new data version
  std::vector<std::string> children;   // listed (parsed by the machine when `listing` is null)
  std::shared_ptr<const Listing> listing;  // listed: the parsed listing, shared
  std::vector<NodeStat> stats;         // stats_read
  std::string data;                    // marker_read, record_read
  Errc errc = Errc::cancelled;         // cancel; rc == error: the ZooKeeper code
};

struct MachineCommand {
  enum class Kind {
    // requests (answered by the event of the same name)
    create,        // create EPHEMERAL_SEQUENTIAL <lock>/<prefix> with the node data; name: the GUID
    make_parents,  // create the lock path and its ancestors as containers
    list,          // getChildren(<lock>), no watch (the shell may batch it)
    list_watch,    // getChildren(<lock>) with a children watch (the shell may batch it: the watch then fires to each)
    touch,         // setData(<lock>/<name>, the node data unchanged, expected `version`)
    read_stats,    // exists(<lock>/<name>) for each of `names`, no watch, pipelined
    watch_blocker, // exists(<lock>/<name>) with a watch
    read_marker,   // getData(<lock>): the hand-off marker
    watch_own,     // exists(<lock>/<name>) with a watch: our own node
    read_record,   // getData(/zklock/revocations/<name>)
    remove,        // delete <lock>/<name>; with_marker: in one multi with setData(<lock>, name)
    remove_extra,  // delete <lock>/<name>: a duplicate of ours (same GUID)
    // outcomes
    granted,   // czxid: the token (czxid of a fresh node, mzxid of a re-take)
    failed,    // errc, message
    lost,      // reason, message
    released,  // the release finished: the node is gone, or retained idle (the lease is over)
    retake_void,  // the re-take did not grant (message: why); queue anew. The node is being released.
    notice,       // something worth a log line (message), reported to no lease
  };
  Kind kind;
  std::uint64_t tag = 0;
  std::string name;
  std::vector<std::string> names;
  bool with_marker = false;
  std::int32_t version = -1;  // touch: the expected data version
  std::int64_t czxid = 0;
  Errc errc = Errc::system_error;
  LossReason reason = LossReason::revoked;
  std::string message;
};

struct MachineConfig {
  Mode mode = Mode::exclusive;
  std::string guid;             // 32 random hex digits; the first 24 mark our nodes' GUIDs
  LossPolicy policy = LossPolicy::tolerant;
  std::uint64_t epoch = 0;      // the session the attempt runs on
  std::string lock_path;        // for messages only
  bool retain = false;          // exclusive only: a release may keep the node idle for a re-take
  // Arm the children watch on listings while no other node has been seen.
  // The shell sets it when the lock is expected to be free (the client's
  // previous acquisition of it found it so): that watch then stands
  // in for the exists watch on our node (invariant 6), and tells a retained
  // node about a waiter (invariant 5). Unset for a lock expected to be
  // contended: a waiter's watch would only bring a notification at the next
  // change, to every waiter (a herd of notifications). Safety never depends
  // on it (the simulator gives each machine either value).
  bool watch_listings = false;
};

class LockMachine {
 public:
  using Commands = std::vector<MachineCommand>;
  // retained: released by the user, node kept idle; retaking: re-take in
  // flight; ending: a retained node being released for real (no lease).
  enum class Phase { idle, acquiring, held, releasing, retained, retaking, ending, failed, released };

  explicit LockMachine(MachineConfig config);

  // Sends the create (and the listing right behind it).
  Commands start();
  Commands step(const MachineEvent& ev);

  Phase phase() const { return phase_; }
  // This attempt saw another node queued (the shell's memory for the
  // client's next acquisition: MachineConfig::watch_listings).
  bool others_seen() const { return others_seen_; }
  // Granted, not lost, not released, and our node is not known to be gone.
  bool holding() const { return phase_ == Phase::held && !loss_ && node_ == NodeState::exists; }
  bool suspended() const { return suspended_; }
  std::optional<LossReason> loss() const { return loss_; }
  const std::string& node_name() const { return name_; }
  std::int64_t czxid() const { return czxid_; }
  const MachineConfig& config() const { return cfg_; }
  // Nothing left to do: an outcome was reported and no node of ours can
  // remain (deleted, gone with the session, or never created).
  bool finished() const;

 private:
  enum class NodeState { none, creating, unknown, exists, deleting, gone };
  using Entry = QueueEntry;
  enum class StatsFor { order, candidates };

  void send_create(Commands& out);
  void relist(Commands& out);     // a fresh listing; older answers become stale
  void transient(Commands& out);  // a step's outcome is unknown: list again (now, or on reconnect)
  void on_created(const MachineEvent& ev, Commands& out);
  void on_listed(const MachineEvent& ev, std::shared_ptr<const Listing> listing, Commands& out);
  void on_order_stats(const MachineEvent& ev, Commands& out);
  void evaluate(Commands& out);
  void on_blocker_gone(Commands& out);
  void on_marker(const MachineEvent& ev, Commands& out);
  void on_candidates(const MachineEvent& ev, Commands& out);
  void watch_blocker(std::size_t index, Commands& out);
  void read_stats(StatsFor purpose, std::vector<std::string> names, Commands& out);
  void session_over(Commands& out);
  void watch_own(Commands& out);
  void cover_own(Commands& out);  // invariant (6): watch our node unless a children watch covers it
  void on_own_gone(Commands& out);
  void on_record(const MachineEvent& ev, Commands& out);
  void on_session(const MachineEvent& ev, Commands& out);
  void on_removed(const MachineEvent& ev, Commands& out);
  void grant(Commands& out);
  void fail(Errc errc, std::string message, Commands& out);
  void lose(LossReason reason, std::string message, Commands& out);
  void remove_own(bool with_marker, Commands& out);
  void remove_extra(const std::string& name, Commands& out);
  void resend_extra(const std::string& name, Commands& out);
  void sweep(Commands& out);  // list, and delete every other node with our GUID
  void on_sweep(const MachineEvent& ev, const Listing& listing, Commands& out);
  // Retained leases (invariant 5).
  void on_release(Commands& out);
  void on_children_changed(const MachineEvent& ev, Commands& out);
  void on_retake(Commands& out);
  void on_retake_listed(const MachineEvent& ev, const Listing& listing, Commands& out);
  void end_retention(Commands& out);  // the real release of a retained node
  void release_done(Commands& out);   // our node is gone: releasing/ending -> released
  bool retaining() const { return cfg_.retain && cfg_.mode == Mode::exclusive; }
  bool nobody_queued() const;
  void void_retake(std::string why, Commands& out);
  bool acquiring() const { return phase_ == Phase::acquiring; }
  std::string guid_for(std::uint32_t n) const;  // the GUID of our n-th create
  bool ours(std::string_view guid) const;       // a GUID of one of our creates
  std::uint64_t next_tag() { return ++tag_; }
  static MachineCommand request(MachineCommand::Kind kind, std::uint64_t tag, std::string name = {});

  MachineConfig cfg_;
  Phase phase_ = Phase::idle;
  NodeState node_ = NodeState::none;
  bool connected_ = true;
  bool suspended_ = false;
  bool resync_pending_ = false;   // a step's outcome was lost: list again once connected
  bool revoked_ = false;          // our node was deleted by someone else
  bool own_watch_pending_ = false;  // the watch on our node could not be set: again on reconnect
  bool remove_pending_ = false;   // a remove lost to a disconnect: resent on reconnect
  bool pending_marker_ = false;   //   ... with the marker?
  bool record_pending_ = false;   // the revocation record must be (re)read
  bool sweep_pending_ = false;    // a create of unknown outcome must be found and deleted
  bool ever_uncertain_ = false;   // a create answer was lost, and no listing since has settled it
  bool listing_settled_ = false;  // listing_ ran after a write barrier that ran after every lost create
  int parent_attempts_ = 0;
  std::uint32_t creates_ = 0;
  // The children watch (invariants 5 and 6) and retained leases.
  std::uint64_t children_tag_ = 0;  // the latest list_watch; its watch is the one that counts (0: none armed)
  bool children_armed_ = false;     // children_tag_'s listing was answered: the server holds its watch
  bool waiter_known_ = true;        // that listing showed another node, or its watch fired (or none yet)
  bool own_watch_off_ = false;      // no exists watch on our node: the children watch covers it (6)
  bool others_seen_ = false;        // a listing showed another node, or the children watch fired
  std::uint64_t touch_tag_ = 0;
  Rc touch_rc_ = Rc::ok;
  std::int32_t version_ = 0;        // our node's data version
  std::int64_t retake_mzxid_ = 0;
  std::optional<LossReason> loss_;
  std::string name_;
  std::int64_t czxid_ = 0;

  std::uint64_t tag_ = 0;
  std::uint64_t create_tag_ = 0, list_tag_ = 0, stats_tag_ = 0, blocker_tag_ = 0, marker_tag_ = 0;
  std::uint64_t own_tag_ = 0, record_tag_ = 0, remove_tag_ = 0, parents_tag_ = 0, barrier_tag_ = 0;
  bool barrier_done_ = false;  // the write barrier (sweep, settle) ran, after every lost create
  StatsFor stats_for_ = StatsFor::order;
  std::vector<std::string> stats_names_;
  std::vector<std::string> extras_;                  // duplicates of ours still to delete
  std::map<std::uint64_t, std::string> extra_tags_;  // their removes in flight

  // The last listing, in creation order once ordered: the shared listing
  // itself when its suffixes suffice, else our copy with the czxids read;
  // our index in it.
  std::shared_ptr<const Listing> listing_;
  std::shared_ptr<std::vector<Entry>> copy_;
  std::int64_t adopt_czxid_ = 0;  // exact listings: the czxid read for the node we adopt
  const std::vector<Entry>& queue() const { return copy_ ? *copy_ : listing_->nodes; }
  std::size_t self_ = 0;
  std::size_t blocker_ = 0;  // index into queue_ of the watched node (or the one just gone)
};

}  // namespace zklock::detail
