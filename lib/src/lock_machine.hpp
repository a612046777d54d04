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
//  (6) While our node exists and we wait or hold, its deletion is seen: a
//      deletion watch on it is armed (watch_own), or the children watch of
//      the latest listing (one issued after our create, so showing our node
//      unless it is gone) is armed and has not fired. When that watch fires,
//      could not be set, or shows that we must wait, the deletion watch is
//      armed then (cover_own). So an acquisition that finds the lock free
//      with a watched listing sends no request for its own node.
//
// A deletion watch (watch_own, watch_blocker) is a getData with a watch, not
// an exists: on a node already gone, exists would leave a watch for its
// creation that never comes (lock_attempt_io.cpp, watch_deletion). The
// events still say "checked" (answered; rc no_node: gone) and "deleted".
#pragma once

#include <chrono>
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
    blocker_checked,  // watch_blocker: rc (ok: the node exists, watch set; no_node: gone)
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
    touch,         // setData(<lock>/<name>, the node data unchanged, expected `version`) → touched
    read_stats,    // exists(<lock>/<name>) for each of `names`, no watch, pipelined → stats_read
    watch_blocker, // getData(<lock>/<name>) with a watch: the deletion watch → blocker_checked, blocker_deleted
    read_marker,   // getData(<lock>): the hand-off marker → marker_read
    watch_own,     // getData(<lock>/<name>) with a watch: our own node → own_checked, own_deleted, own_changed
    read_record,   // getData(/zklock/revocations/<name>) → record_read
    remove,        // delete <lock>/<name>; with_marker: in one multi with setData(<lock>, name) → removed
    remove_extra,  // delete <lock>/<name>: a duplicate of ours (same GUID), or the write barrier → removed
  };
  Kind kind;
  std::uint64_t tag = 0;
  std::string name;
  std::vector<std::string> names;
  bool with_marker = false;
  std::int32_t version = -1;  // touch: the expected data version
};

// What the attempt reports to its lease or caller.
struct MachineOutcome {
  enum class Kind {
    granted,      // token: the czxid of a fresh node, the mzxid of a re-take
    failed,       // errc, message
    lost,         // reason, message
    released,     // the release finished: the node is gone, or retained idle (the lease is over)
    retake_void,  // the re-take did not grant (message: why); queue anew. The node is being released.
    notice,       // something worth a log line (message), reported to no lease
  };
  Kind kind;
  std::int64_t token = 0;
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

class LockMachine {
 public:
  using Commands = MachineCommands;
  using Clock = std::chrono::steady_clock;
  // retained: released by the user, node kept idle; retaking: re-take in
  // flight; ending: a retained node being released for real (no lease).
  enum class Phase { idle, acquiring, held, releasing, retained, retaking, ending, failed, released };

  explicit LockMachine(MachineConfig config);

  // Sends the create (and the listing right behind it).
  Commands start();
  Commands step(const MachineEvent& ev);

  Phase phase() const { return phase_; }
  // This attempt saw another node queued (the shell remembers it for the
  // client's next acquisition: MachineConfig::history).
  bool others_seen() const { return others_seen_; }
  // Granted, not lost, not released, and our node is not known to be gone.
  bool holding() const { return phase_ == Phase::held && !loss_ && own_.state == NodeState::exists; }
  // The lease's valid(): holding, and the session's validity bound (for
  // this attempt's session; min() for another) is still ahead of `now`.
  bool holding(Clock::time_point now, Clock::time_point valid_until) const { return holding() && now < valid_until; }
  bool suspended() const { return link_ == Link::down; }
  std::optional<LossReason> loss() const { return loss_; }
  const std::string& node_name() const { return own_.name; }
  std::int64_t czxid() const { return own_.czxid; }
  const MachineConfig& config() const { return cfg_; }
  // Retained idle, and `who` is the holder the node's data names: a re-take
  // may begin (step(retake)).
  bool may_retake(const Holder& who) const { return phase_ == Phase::retained && who == cfg_.holder; }
  // Nothing left to do: an outcome was reported and no node of ours can
  // remain (deleted, gone with the session, or never created).
  bool finished() const;

 private:
  enum class NodeState { none, creating, unknown, exists, deleting, gone };
  enum class StatsFor { order, candidates };
  using Entry = QueueEntry;

  // The session as this attempt sees it: down is disconnected (suspended),
  // over is expired.
  enum class Link { up, down, over };

  // Work a disconnect interrupted, replayed once the same session is back,
  // in this order (replay): our node's watch, the revocation record, our
  // node's remove (plain, or with the marker), the duplicates' removes (owed
  // while `extras` is not empty), the sweep, the listing.
  enum class Duty : std::uint8_t { watch_own, read_record, remove, remove_marked, extras, sweep, relist };
  struct Obligations {
    std::uint8_t bits = 0;
    std::vector<std::string> extras;                  // duplicates of ours still to delete (every one resent)
    std::map<std::uint64_t, std::string> extra_tags;  // their removes in flight
    bool has(Duty d) const { return d == Duty::extras ? !extras.empty() : (bits & bit(d)) != 0; }
    void add(Duty d) { bits |= bit(d); }
    void drop(Duty d) { bits &= static_cast<std::uint8_t>(~bit(d)); }
    static std::uint8_t bit(Duty d) { return static_cast<std::uint8_t>(1u << static_cast<unsigned>(d)); }
  };

  // Our own node: the one we hold or wait with.
  struct OwnNode {
    NodeState state = NodeState::none;
    std::string name;
    std::int64_t czxid = 0;
    std::int32_t version = 0;     // its data version (a re-take's setData expects it)
    std::uint64_t watch_tag = 0;  // the latest watch_own (0: none, or it fired)
    // No watch of its own: the children watch stands in for it (invariant 6).
    bool covered = false;
    Duty removal = Duty::remove;  // the remove in flight: remove, or remove_marked
  };

  // The current round: one listing and the reads that rest on it. abandon()
  // makes every answer to it stale (a fresh listing, a failure, our node
  // gone); the listing itself is kept until the next one replaces it.
  struct Round {
    std::uint64_t list_tag = 0, stats_tag = 0, blocker_tag = 0, marker_tag = 0, parents_tag = 0;
    // The listing, in creation order once ordered: the shared listing itself
    // when its suffixes suffice, else our copy with the czxids read.
    std::shared_ptr<const Listing> listing;
    std::shared_ptr<std::vector<Entry>> copy;
    bool settled = false;         // it ran after a write barrier that ran after every lost create
    std::int64_t adopt_czxid = 0; // exact listings: the czxid read for the node we adopt
    std::size_t self = 0;         // our index in queue()
    std::size_t blocker = 0;      // the watched node's index (or the one just gone)
    StatsFor stats_for = StatsFor::order;
    std::vector<std::string> stats_names;
    const std::vector<Entry>& queue() const { return copy ? *copy : listing->nodes; }
    void abandon() { list_tag = stats_tag = blocker_tag = marker_tag = parents_tag = 0; }
  };

  // The children watch of our latest watched listing (invariants 5 and 6).
  struct ChildrenWatch {
    // none: no watch (never set, fired, or not known to be set); sent: its
    // listing not answered yet; quiet: armed, and the listing that set it
    // and every later one showed no other node; busy: armed, another node seen.
    enum class State { none, sent, quiet, busy };
    State state = State::none;
    std::uint64_t tag = 0;  // the listing that set it
    bool armed() const { return state == State::quiet || state == State::busy; }
  };
  using Watch = ChildrenWatch::State;

  // A create's answer was lost: a node of ours may exist that no answer
  // named. open: not settled; barrier_ran: a write barrier sent after every
  // lost create ran, so the next listing settles it (shows each such node).
  enum class Doubt { none, open, barrier_ran };

  // A re-take in flight (phase retaking only).
  struct Retake {
    std::uint64_t touch_tag = 0;
    Rc touch_rc = Rc::connection_loss;  // until answered
    std::int64_t mzxid = 0;             // the setData's: the re-take's token
  };

  void send_create(Commands& out);
  void relist(Commands& out);     // a fresh listing; older answers become stale
  void transient(Commands& out);  // a step's outcome is unknown: list again (now, or on reconnect)
  void on_created(const MachineEvent& ev, Commands& out);
  void on_listed(const MachineEvent& ev, std::shared_ptr<const Listing> listing, Commands& out);
  void note_listing(const MachineEvent& ev, const Listing& listing);
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
  void read_record(Commands& out);
  void on_record(const MachineEvent& ev, Commands& out);
  void on_session(const MachineEvent& ev, Commands& out);
  void replay(Commands& out);     // the obligations, once the same session is back
  void on_expired(Commands& out);
  void on_removed(const MachineEvent& ev, Commands& out);
  void grant(std::int64_t token, Commands& out);
  void fail(Errc errc, std::string message, Commands& out);
  void lose(LossReason reason, std::string message, Commands& out);
  void remove_own(Duty kind, Commands& out);
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
  bool nobody_queued() const { return children_.state == Watch::quiet; }
  void void_retake(Rc touch_rc, std::string why, Commands& out);
  bool acquiring() const { return phase_ == Phase::acquiring; }
  std::string guid_for(std::uint32_t n) const;  // the GUID of our n-th create
  bool ours(std::string_view guid) const;       // a GUID of one of our creates
  std::uint64_t next_tag() { return ++tag_; }
  static void send(Commands& out, MachineRequest::Kind kind, std::uint64_t tag, std::string name = {});
  static void report(Commands& out, MachineOutcome outcome) { out.outcomes.push_back(std::move(outcome)); }
  static void notice(Commands& out, std::string message);

  MachineConfig cfg_;
  bool watch_listings_ = false;  // from cfg_.history (the constructor says why)
  Phase phase_ = Phase::idle;
  Link link_ = Link::up;
  OwnNode own_;
  Round round_;
  ChildrenWatch children_;
  Obligations duties_;
  Doubt doubt_ = Doubt::none;
  std::uint64_t barrier_tag_ = 0;  // the write barrier in flight
  std::optional<Retake> retake_;
  std::optional<LossReason> loss_;
  bool others_seen_ = false;       // a listing showed another node, or the children watch fired
  int parent_attempts_ = 0;
  std::uint32_t creates_ = 0;
  std::uint64_t tag_ = 0;
  std::uint64_t create_tag_ = 0, record_tag_ = 0, remove_tag_ = 0;
};

}  // namespace zklock::detail
