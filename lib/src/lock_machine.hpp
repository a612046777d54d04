// Internal: the lock recipe as a pure state machine, one acquisition of one lock node from create to release.
//
// Events in (answers to the commands it issued, watch notifications, session
// changes, the user's cancel and release), commands out (requests to send,
// and outcomes to report). No threads, no clocks, no ZooKeeper calls:
// lock_attempt.hpp is the shell that executes commands with the C client,
// and tests/sim drives thousands of machines against a model of ZooKeeper.
// docs/design.md gives the argument. The code: lock_machine_types.hpp (the
// events, requests, outcomes and configuration), lock_machine.cpp (start,
// the dispatch, outcomes), lock_machine_acquire.cpp (up to the grant),
// lock_machine_hold.cpp (after it, the session's changes, cleanup) and
// lock_machine_retain.cpp (retained leases).
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
//      it and every later one showed no other node (nobody_queued). The
//      notification of that watch ends the retention at once. A re-take is
//      local — no request — and grants the node's own czxid again (with the
//      next lease ordinal, invariant 8), only while
//      retained, connected, inside the validity bound and within the waiting
//      watchdog's period of a listing that showed the node (the event says
//      both), the watch quiet, no loss seen and the request not cancelled;
//      otherwise it is void: the retention ends with the usual release
//      (delete + marker) and `retake_void`.
//  (6) While our node exists and we wait or hold, its deletion is seen: a
//      deletion watch on it is armed (watch_own), or the children watch of
//      the latest listing (one issued after our create, so showing our node
//      unless it is gone) is armed and has not fired. When that watch fires,
//      could not be set, or shows that we must wait, the deletion watch is
//      armed then (cover_own). So an acquisition that finds the lock free
//      with a watched listing sends no request for its own node.
//
//  (7) No grant rests on one notification. When the shell says the attempt
//      has waited on the same blocker for the watchdog's period, it lists
//      again (the shell batches a client's listings of one lock): a blocker
//      that listing no longer shows went unnoticed and is passed as usual.
//      One it still shows keeps its watch (no request). At the head of the
//      queue, it is also probed at the leader
//      (probe_blocker); if the leader has no such node, our server has
//      diverged from the quorum: reported (`diverged`), and the blocker
//      counts as proven gone (invariant 4).
//
//  (8) No two leases share a token. Every grant reports the lease ordinal
//      of our node: 0 for the first, one more for each re-take (counted
//      here, so a re-take stays free of requests). A fence orders tokens
//      as (czxid, ordinal): a re-take's lease orders after every earlier
//      lease of the node, and a later node's (another holder's) after all.
//
//  (9) A lease is handed out only while the session's validity bound covers
//      it: the `granted` outcome goes out in a step whose event says so
//      (within_bound, from the shell's clock; or no_bound: the settings
//      prove none, and valid() stays false). Until then the grant waits in
//      `proving`: a cancel fails the attempt and deletes the node (no
//      marker: no lease was handed out); a loss fails it with the loss's
//      code; a lapse of the bound ends nothing (no lease exists to lose).
//
// A deletion watch (watch_own, watch_blocker) is a getData with a watch, not
// an exists: on a node already gone, exists would leave a watch for its
// creation that never comes (lock_attempt_io.cpp, watch_deletion). The
// events still say "checked" (answered; rc no_node: gone) and "deleted".
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "clock.hpp"
#include "lock_machine_types.hpp"

namespace zklock::detail {

class LockMachine {
 public:
  using Commands = MachineCommands;
  using Clock = std::chrono::steady_clock;
  // proving: granted, not handed out until an event says the validity
  // bound covers it (invariant 9); retained: released by the user, node kept
  // idle; ending: a retained node being released for real (no lease).
  enum class Phase { idle, acquiring, proving, held, releasing, retained, ending, failed, released };

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
  const std::string& loss_detail() const { return loss_detail_; }
  // Acquiring, and `tag` is the watch_blocker whose deletion it waits for
  // (the round's blocker, or the one the watchdog doubted and still follows).
  bool waits_on(std::uint64_t tag) const {
    return acquiring() && tag != 0 && (tag == round_.blocker_tag || tag == doubted_.watch_tag);
  }
  const std::string& node_name() const { return own_.name; }
  // Retaining (config.retain): how many of the listings it evaluated showed
  // our node. The shell times a re-take's `confirmed` from the step that
  // raised it (the clock is the shell's); 0 when not retaining.
  std::uint64_t confirmations() const { return confirmations_; }
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
    std::uint64_t watch_tag = 0;  // the latest watch_own (0: none, or it fired)
    // No watch of its own: the children watch stands in for it (invariant 6).
    bool covered = false;
    Duty removal = Duty::remove;  // the remove in flight: remove, or remove_marked
  };

  // The current round: one listing and the reads that rest on it. abandon()
  // makes every answer to it stale (a fresh listing, a failure, our node
  // gone); the listing itself is kept until the next one replaces it.
  struct Round {
    std::uint64_t list_tag = 0, stats_tag = 0, blocker_tag = 0, marker_tag = 0, parents_tag = 0, probe_tag = 0;
    // The listing, in creation order once ordered: the shared listing itself
    // when its suffixes suffice, else our copy with the czxids read.
    std::shared_ptr<const Listing> listing;
    std::shared_ptr<std::vector<Entry>> copy;
    bool settled = false;         // it ran after a write barrier that ran after every lost create
    std::int64_t adopt_czxid = 0; // exact listings: the czxid read for the node we adopt
    std::size_t self = 0;         // our index in queue()
    std::size_t blocker = 0;      // the watched node's index (or the one just gone)
    std::uint64_t probed_watch = 0;  // probe_tag's blocker: the watch it had (invariant 7)
    StatsFor stats_for = StatsFor::order;
    std::vector<std::string> stats_names;
    const std::vector<Entry>& queue() const { return copy ? *copy : listing->nodes; }
    void abandon() { list_tag = stats_tag = blocker_tag = marker_tag = parents_tag = probe_tag = 0; }
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
  void on_watchdog(Commands& out);                   // invariant (7)
  void on_probed(const MachineEvent& ev, Commands& out);
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
  void grant();                            // our node passed the queue: proving (invariant 9)
  void hand_out(Commands& out);           // proving -> held: the `granted` outcome
  void fail(Errc errc, std::string message, Commands& out);
  void withdraw(Errc errc, std::string message, Commands& out);  // proving -> failed, the node released
  void end_failed(Errc errc, std::string message, Commands& out);  // -> failed, reported
  void lose(LossReason reason, std::string message, Commands& out);
  void remove_own(Duty kind, Commands& out);
  void remove_extra(const std::string& name, Commands& out);
  void resend_extra(const std::string& name, Commands& out);
  void sweep(Commands& out);  // list, and delete every other node with our GUID
  void on_sweep(const MachineEvent& ev, const Listing& listing, Commands& out);
  // Retained leases (invariant 5).
  void on_release(const MachineEvent& ev, Commands& out);
  void on_children_changed(const MachineEvent& ev, Commands& out);
  void on_retake(const MachineEvent& ev, Commands& out);
  void end_retention(Commands& out);  // the real release of a retained node
  void release_done(Commands& out);   // our node is gone: releasing/ending -> released
  bool nobody_queued() const { return children_.state == Watch::quiet; }
  void void_retake(std::string why, Commands& out);
  bool acquiring() const { return phase_ == Phase::acquiring; }
  bool granted() const { return phase_ == Phase::proving || phase_ == Phase::held; }  // our node passed the queue
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
  std::optional<LossReason> loss_;
  std::string loss_detail_;
  // The blocker the watchdog doubted and the tag of its watch, until the
  // listing it asked for is evaluated (invariant 7); any other listing
  // forgets it (relist).
  struct Doubted {
    std::string name;
    std::uint64_t watch_tag = 0;
  } doubted_;
  bool others_seen_ = false;       // a listing showed another node, or the children watch fired
  int parent_attempts_ = 0;
  std::uint32_t creates_ = 0;
  std::uint64_t tag_ = 0;
  std::uint64_t create_tag_ = 0, record_tag_ = 0, remove_tag_ = 0;
  std::int64_t leases_ = 0;  // grants of our node so far: the next lease's ordinal (invariant 8)
  std::uint64_t confirmations_ = 0;  // confirmations()
};

}  // namespace zklock::detail
