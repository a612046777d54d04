// The deterministic simulator: lock machines (lib/src/lock_machine.hpp)
// driven against the ZooKeeper model (sim_zk.hpp) by seeded random
// schedules with faults, checking the recipe's invariants after every step.
//
//   sim_world.cpp       setup, the scheduler (which step runs next), faults, run_sim
//   sim_driver.cpp      the shell: machine commands -> requests, replies -> events; the actors
//   sim_invariants.cpp  the checks
//
// One seed fixes everything (the run's shape, every choice): a failing seed
// replays exactly. Nothing depends on time, addresses or hash order.
//
// Why this simulator and its one-server model (sim_zk.hpp) stay beside the
// ensemble simulator (ensemble/ens_world.hpp), which runs the same machine
// against three timed servers: the ensemble model has the time, leaders,
// partitions, stale follower reads and the session tracker, and checks
// exclusion, token order, the validity bound and liveness; this one has no
// clock and explores the recipe's orderings far more densely (every step is
// a chosen interleaving of serve, commit, deliver, fault), and it models what
// the ensemble model leaves out: shared leases and readers beside writers,
// multi-lock actors in path order and actors pipelined on one lock, the
// sequential suffix near its end (3.8.0's saturation, and the wrap) so that
// listings must be ordered by czxid, parent containers and their reaper
// (make_parents), writes lost with a connection and applied later (limbo),
// dropped deletion notifications (the waiting watchdog's case); and it
// checks the machine's own promises one by one (the hand-off marker, a loss
// told before the user's release, the quiet head granted, the retention
// ended by its watch). Folding those into the ensemble model would
// make one model of both; until then each checks what the other cannot.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "lock_machine.hpp"
#include "sim_zk.hpp"

namespace zklock::sim {

enum class Regime { normal, saturated, wrap };
const char* regime_name(Regime r);

struct SimConfig {
  std::uint64_t seed = 1;
  Regime regime = Regime::normal;
  std::uint64_t steps = 20000;       // steps with faults; then the fault-free tail
  std::uint64_t tail_bound = 60000;  // liveness: everything settles within this many more steps
  bool trace = false;                // keep the last trace_keep events
  bool print_trace = false;          // print every event as it happens
  std::size_t trace_keep = 200;
  // Invariant (3) also for a loss the machine had seen but not yet reported
  // when the user released (it waits for the revocation record first).
  bool strict_loss = false;  // ZKLOCK_SIM_STRICT_LOSS=1
  // One session, one lock, one retaining exclusive actor: long runs of
  // re-takes with nobody else queueing (faults as usual).
  bool lone_retainer = false;
  // One in this many blocker deletion notifications is dropped while the
  // faults last (0: none); the waiting watchdog fires now and then for
  // every waiter, in the tail too (the shell's timers never stop).
  std::uint64_t drop_notifications = 40;
};

struct SimCounters {
  std::uint64_t steps = 0, grants = 0, machines = 0, commits = 0, max_pipeline = 0;
  std::uint64_t negative_suffixes = 0, overlapping_creates = 0;
  std::uint64_t tied_listings = 0;   // a listing with two nodes of one suffix
  std::uint64_t czxid_listings = 0;  // a listing that suffixes cannot order (czxid needed)
  std::uint64_t disconnects = 0, expiries = 0, revocations = 0, reaps = 0, lost = 0;
  std::uint64_t deferred_losses = 0;
  std::uint64_t quiet_heads = 0;   // steps with a holding head node on a quiet session (check_heads judged)
  std::uint64_t quiet_losses = 0;  // releases of a deleted node with the session quiet (check_told judged)
  std::uint64_t retains = 0, retakes = 0, retakes_void = 0;  // releases kept idle; re-takes granted / voided
  std::uint64_t pinned_refusals = 0;  // requests of a session already over, refused before they were sent
  // Invariant (9) of lock_machine.hpp: grants that waited in `proving` and
  // were handed out later; and those withdrawn (cancelled or lost) there.
  std::uint64_t proved_later = 0, withdrawn = 0;
  std::uint64_t dropped_notifications = 0, watchdogs = 0, probes = 0;  // the waiting watchdog (lock_machine.hpp (7))
  // A retainer asked while its session was over, then was granted on a new one.
  std::uint64_t regrants_after_dead_session = 0;
  std::uint64_t stale_retakes = 0;   // re-takes granted on a node already deleted (the news on its way)
  std::uint64_t waiter_notices = 0;  // children notifications delivered while a waiter was queued ((7) judged)
  std::uint64_t max_child_watches = 0;  // SimZk::Stats::max_child_watches
  std::uint64_t tail_steps = 0;  // steps from the end of the faults until everything settled  // seen, unreported at the user's release (see strict_loss)
};

struct SimResult {
  bool ok = true;
  std::string violation;   // the invariant, and what broke it
  std::uint64_t step = 0;  // the step after which it was seen
  SimCounters counters;
  std::string trace;       // the last events before the violation (from a traced replay)
};

// Runs one seed. A failing run is replayed with tracing to fill `trace`.
SimResult run_sim(const SimConfig& cfg);
// "seed 42 (saturated): <violation> at step 1234" and the trace.
std::string describe(const SimConfig& cfg, const SimResult& r);

// ---------------------------------------------------------------------------
// Internal: the world of one run.

// A lease's fencing token as a fence orders it: (czxid, lease ordinal).
using SimToken = std::pair<std::int64_t, std::int64_t>;
inline std::string token_text(const SimToken& t) {
  return std::to_string(t.first) + (t.second ? "." + std::to_string(t.second) : std::string());
}

struct MachineRec {
  std::unique_ptr<detail::LockMachine> m;
  // A blocker deletion's notification to it was dropped: until it lists
  // again (its watchdog, or a reconnect), nothing moves it (check_heads
  // skips it; the tail's liveness check judges it).
  bool notification_lost = false;
  int lock = 0, actor = -1;
  std::uint64_t session = 0;
  std::string guid;
  int granted = 0, failed = 0, lost = 0, released = 0;
  bool release_requested = false;
  bool must_lose = false;  // granted, and its node was deleted by someone else
  bool knew_at_release = false;  // released by the user while it knew its node was gone, unreported
  // Its children watch's notification was delivered while another node was
  // under the lock, and no listing answered since showed that node gone.
  bool waiter_told = false;
  std::uint64_t watch_tag = 0;  // its latest list_watch: the children watch that counts
  std::string held_path;   // lock/<name> at the grant
  SimToken token;
};

struct Route {  // where a reply goes
  int machine = -1;
  std::uint64_t tag = 0;
  detail::MachineEvent::Kind kind{};
  int agg = -1;  // index into aggs_ when one command is several requests
  std::size_t part = 0;
  bool children_watch = false;  // list_watch: a children notification follows
  std::string path;             // a watched node's path (re-armed on a data change)
};

struct Agg {
  std::size_t want = 0, got = 0;
  std::vector<detail::NodeStat> stats;
};

struct Slot {  // one client process: one session at a time
  // replacing: the client learned that its session expired (its machines
  // heard `expired`) and has not opened the next one yet. The shell's
  // epoch() is still the old session's then, so an acquisition started
  // meanwhile belongs to it, and each of its requests is refused as the
  // pin does (Client::Impl::issue): answered session_expired, never sent
  // on the successor.
  enum State { connected, disconnected, server_expired, replacing } state = connected;
  std::uint64_t sid = 0;  // the session; the machines' epoch
  std::uint64_t since = 0;
  bool validity_sent = false;
  std::deque<Request> held;   // issued while disconnected: sent on reconnect
  std::vector<int> machines;  // machines on this session, not yet finished
};

struct Actor {
  enum Kind { single, multi } kind = single;
  enum State { idle, acquiring, holding, releasing } state = idle;
  int slot = 0;
  int partner = -1;  // pipelined: started back to back with this actor, same lock
  bool follower = false;
  std::string owner;
  Mode mode = Mode::exclusive;
  LossPolicy policy = LossPolicy::tolerant;
  std::vector<int> locks;  // multi: in path order
  std::uint64_t wake = 0;
  bool cancel_armed = false;
  std::vector<int> ms;  // the current attempt's machines
  // Retained leases (single exclusive actors only): the machine whose node
  // is retained idle, and when its retain time runs out.
  bool retains = false;
  int retained = -1;
  std::uint64_t retain_until = 0;
  // A retainer that asked again while its session was over (the server's
  // expiry not yet learned, or the client between sessions): the session
  // it asked on, until the actor is granted on a later one.
  std::uint64_t asked_on_dead_session = 0;
};

class World {
 public:
  explicit World(const SimConfig& cfg);
  SimResult run();

 private:
  // sim_world.cpp
  void setup();
  bool step_once();
  void begin_tail();
  void disconnect(int slot);
  void reconnect(int slot);
  void learn_expiry(int slot);
  void replace_session(int slot);
  void revoke();
  void reap();
  void session_event(int slot, detail::MachineEvent::Kind kind);
  void note(const std::string& line);
  // sim_driver.cpp
  int start_machine(int actor, int lock, Mode mode);
  void feed(int machine, detail::MachineEvent ev);  // with the shell's clock: within_bound
  void apply(int machine, const detail::MachineCommands& cmds);
  void execute(int machine, const detail::MachineRequest& c);
  void submit(int machine, Request req, Route route);
  void on_reply(const Reply& r);
  void drain_local();
  void on_outcome(int machine, const detail::MachineOutcome& c);
  void actor_tick(int actor);
  void actor_start(int actor);
  void actor_release(int actor);
  void actor_settle(int actor);
  void retain_deadline(int actor);
  void track_deletions();
  void note_waiter_news(int machine);                                    // invariant (7)
  void note_listing(int machine, const std::vector<std::string>& children);  // invariant (7)
  // sim_invariants.cpp
  void check_step();
  void check_heads();  // (6) a quiet head that holds has been granted
  void check_grant(int machine);
  void check_told(int machine);  // (3) at the user's release: no loss left untold
  void check_end();
  bool quiescent() const;
  void violate(const std::string& what);

  SimConfig cfg_;
  Rng rng_;
  SimZk zk_;
  std::vector<std::string> locks_;
  std::vector<Slot> slots_;
  std::vector<Actor> actors_;
  std::deque<MachineRec> machines_;
  std::map<std::string, int> by_guid_;
  std::set<std::string> revoked_;  // nodes the detector has revoked
  std::map<std::uint64_t, Route> routes_;
  std::map<std::uint64_t, int> removes_;  // cookie of a remove -> the machine removing its own node
  std::vector<Agg> aggs_;
  std::deque<std::pair<std::uint64_t, Zrc>> local_;  // answers the client gives itself
  std::uint64_t next_cookie_ = 0, now_ = 0;
  bool tail_ = false;
  bool bound_now_ = false;  // the event being fed says the bound covers now (checked at each hand-out)
  // the run's shape (from the seed)
  std::uint32_t w_commit_ = 10, w_fault_ = 10, hold_max_ = 50, validity_after_ = 20;
  // grant history per lock, for the token invariant
  std::vector<SimToken> max_token_, max_exclusive_token_;
  std::vector<std::vector<int>> holders_;  // per lock: granted machines not yet released
  SimCounters counters_;
  std::string violation_;
  std::deque<std::string> ring_;
};

}  // namespace zklock::sim
