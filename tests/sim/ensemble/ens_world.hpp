// The ensemble simulator: the shipped lock machine (lib/src/lock_machine.hpp)
// and the validity bound against a timed model of a three-server ZooKeeper
// 3.8.0 ensemble.
//
// The recipe simulator (../sim_world.hpp) has one server and no clock; it
// takes "the lease is valid only while the session lives" as given. This one
// tests that premise with the machine the library ships. It models, in
// simulated time with a clock per process (rates within ±50 ppm):
//   - Zab as far as sessions need it: a leader, two followers, proposals,
//     acks after an fsync, commits in order, elections among a reachable
//     quorum, a new leader adopting the longest history and starting every
//     session afresh (SessionTrackerImpl's constructor);
//   - the session tracker on the leader (deadlines rounded up to tickTime,
//     expiry per tick in two steps as SessionTrackerImpl.run takes them: the
//     expired sessions are polled off the queue, then, after a seeded stall
//     of at most Config::expiry_stall, marked closing and their close
//     proposed; touches and writes in between pass; closing sessions refuse
//     writes and touches), the
//     followers' touch tables handed over in ping replies, leader pings every
//     tickTime/2 plus scheduling jitter, syncLimit on both sides;
//   - `sync` as 3.8.0 answers it (the leader at once when nothing is
//     outstanding; matchSyncs = false);
//   - each server's tree (ens_db.cpp): lock nodes, sequential ephemeral
//     children, the hand-off marker, revocation records; reads answered from
//     the server's own applied state (a follower's may be stale), one-shot
//     data and children watches per connection, re-set on a reconnect as the
//     C client's setWatches does, per-session FIFO (a read waits for the
//     session's earlier writes), and a connect refused by a server behind
//     the client's last seen zxid;
//   - faults: a member partitioned, a leader cut in a gray way (the
//     followers reset, the leader's side silent), a leader->follower stream
//     held and then the follower->leader one too, a follower->leader
//     stream held alone (the leader keeps pinging), servers paused and
//     killed, client connections cut or silenced, clients paused; and, apart
//     from them, revocations (a holder's node deleted with its record, as the
//     detector does).
// Each client runs the library's validity rule (lib/src/validity_rule.hpp)
// on its committed writes, heartbeats as the library sends them, and real
// LockMachines on Config::locks locks (ens_shell.hpp). Rule::sync_pairing is
// an older rule (any leader-ordered answer paired with one a period later);
// Rule::chain_unanchored, the chain rule without its anchor.
//
// Checked after every step that could break them:
//   V1  a lease is handed out while no other client's lease on the lock
//       reports valid() (a lease whose node the detector revoked excepted:
//       the operator broke exclusion, the fence handles it); and, unless
//       bypassed, only while its own bound covers it (machine invariant 9);
//   V2  a session's close commits only when its client's bound has passed;
//   V3  tokens (czxid, lease ordinal) strictly increase in hand-out order per
//       lock (a hand-out of a node already revoked excepted);
//   L1  after the faults, every client is handed a lease again, no lease
//       handed out on a settled ensemble lapses (the heartbeat keeps it up),
//       and at the end no node in the leader's tree belongs to a finished
//       attempt.
// One seed fixes everything; a failing seed replays exactly.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <vector>

#include "ens_shell.hpp"
#include "sim_zk.hpp"  // Rng
#include "validity_rule.hpp"

namespace zklock::ensim {

enum class Rule { chain, sync_pairing, chain_unanchored };
const char* rule_name(Rule r);

struct Config {
  std::uint64_t seed = 1;
  Rule rule = Rule::chain;
  int clients = 4;
  int locks = 3;
  // 0: chosen from the seed (see ens_world.cpp, kShapes).
  Micros tick = 0, timeout = 0;
  int sync_limit = 0;
  // The leader's longest poll-to-mark stall (real time). -1: a quarter tick,
  // as the rule assumes (ValidityParams::expiry_stall); 0: one atomic step.
  Micros expiry_stall = -1;
  int fault_kinds = 9;  // ens_faults.cpp; 8 leaves out the newest (a follower's stream held)
  Micros fault_time = 60 * kSec;  // faults during this; then a fault-free tail
  bool revocations = true;        // the detector revokes a holder now and then while faults run
  // Test only: every event claims the bound covers now, so a grant is handed
  // out without its proof (the old shell's hand-out bug).
  bool bypass_proving = false;
  bool print_trace = false;
  std::size_t trace_keep = 60;
  bool check_liveness = true;  // L1 (off for rules that are not the library's)
  bool check_close = true;     // V2; without it a broken rule runs on until V1 sees the grant
};

struct Counters {
  std::uint64_t steps = 0, handouts = 0, lapses = 0, expiries = 0, elections = 0;
  std::uint64_t commits = 0, heartbeats = 0, syncs = 0, faults = 0;
  std::uint64_t window_writes = 0;  // writes prepared between a session's poll and its mark
  // The machines: attempts started; grants held in proving and handed out
  // later; withdrawn there; leases lost; releases kept idle; re-takes
  // granted and voided; nodes revoked; waiting watchdogs and retained
  // nodes' confirmations fired; refused connects (server behind).
  std::uint64_t machines = 0, proved_later = 0, withdrawn = 0, lost = 0, retains = 0, retakes = 0, retakes_void = 0;
  std::uint64_t revocations = 0, watchdogs = 0, confirm_checks = 0, refused_behind = 0;
  std::map<std::string, std::uint64_t> by_fault;
  Micros session_time = 0;  // summed over sessions, for heartbeats per session-period
  Micros sim_time = 0;
};

struct Result {
  bool ok = true;
  std::string violation;
  std::uint64_t step = 0;
  Micros at = 0;
  Config cfg;  // with the seed's shape filled in
  Counters c;
  std::deque<std::string> trace;
};

Result run(Config cfg);
std::string describe(const Result& r);

// ---------------------------------------------------------------------------
// Internal: one run's world.

enum class Role { looking, following, leading };
enum class TxnKind { create_session, close_session, create_node, delete_node, heartbeat, release_node, probe_node,
                     revoke_node };
const char* txn_name(TxnKind k);

struct Txn {
  std::uint64_t zxid = 0;  // epoch << 32 | counter
  TxnKind kind{};
  std::uint64_t session = 0;
  int origin = -1;        // the server whose client sent it (answers it at apply)
  std::uint64_t req = 0;  // the client's request id
  Op op;
};

struct ZNode {
  std::int64_t czxid = 0, mzxid = 0, pzxid = 0;
  std::uint64_t owner = 0;  // ephemeral owner session
  std::int32_t cversion = 0;
  std::string data;
  std::set<std::string> children;
};

struct Server {
  int id = 0;
  Role role = Role::looking;
  int leader = -1;
  std::uint32_t epoch = 0;
  std::uint64_t gen = 0;  // bumped on every role change: older timers are void
  std::vector<Txn> log;
  std::size_t applied = 0;  // log[0, applied) is in the db
  std::set<std::uint64_t> sessions;                   // db: live sessions
  std::map<std::string, ZNode> tree;                  // db: the nodes
  // Leading.
  std::uint32_t counter = 0;
  std::map<int, Micros> followers;                    // follower -> last heard from (local clock)
  std::map<std::uint64_t, std::set<int>> acks;        // zxid -> members that logged it
  // owner: the server the session is on; polled: off the expiry queue, to be
  // marked closing after the stall (until then it still passes checks).
  struct Tracked { Micros deadline; bool closing; int owner; bool polled = false; };
  std::map<std::uint64_t, Tracked> tracker;
  std::vector<std::pair<std::uint64_t, std::pair<int, std::uint64_t>>> syncs;  // wait for zxid -> (origin, req)
  // Following.
  Micros last_from_leader = 0;
  std::set<std::uint64_t> touches;
  // Clients.
  std::map<int, std::uint64_t> clients;               // connected client -> session
  std::map<std::uint64_t, int> waiting;               // connect request id -> client
  // Per connected client, its requests in order (FIFO): a read is answered
  // when every earlier request of the session has been.
  struct Pend { std::uint64_t req; Op op; bool done = false; Answer ans; };
  std::map<int, std::deque<Pend>> fifo;
  // Watches of connected clients: path -> (client, watch id).
  std::map<std::string, std::set<std::pair<int, std::uint64_t>>> data_watches, child_watches;
  std::uint64_t last_zxid() const { return applied == 0 ? 0 : log[applied - 1].zxid; }
};

struct Event {
  Micros at;
  std::uint64_t seq;
  int proc;  // -1: the world (faults); else whose pause delays it
  std::function<void()> fn;
  bool operator>(const Event& o) const { return at != o.at ? at > o.at : seq > o.seq; }
};

// A connection between two processes, one state per direction.
struct Link {
  struct Dir {
    bool held = false;  // bytes wait (a cut or a blackhole); TCP delivers them later or never
    std::deque<std::pair<int, std::function<void()>>> held_q;  // (receiver, delivery)
    Micros last = 0;  // FIFO: nothing overtakes the previous delivery
  };
  Dir dir[2];              // [0]: lower id -> higher id
  std::uint64_t view[2] = {0, 0};  // each end's idea of the current connection
};

class World {
 public:
  explicit World(Config cfg);
  Result run();

  // ens_net.cpp: time, clocks, links, pauses.
  Micros local(int proc) const;
  void at_local(int proc, Micros local_delay, std::function<void()> fn);
  void at_real(int proc, Micros when, std::function<void()> fn);
  void send(int from, int to, std::function<void()> fn);  // delivered only on the same connection
  void send_close(int from, int to, std::function<void()> fn);  // a FIN: then `from` closes its end
  void enqueue(int from, int to, std::function<void()> deliver);
  void connect_link(int a, int b);                         // a new connection, both ends
  void reset_view(int proc, int peer);                     // proc closes its end, silently
  void release_held(int a, int b);                         // a held direction goes on, in order
  bool reachable(int a, int b) const;
  Link& link(int a, int b);
  void trace(const std::string& s);
  void fail(const std::string& what);
  Micros lat(int a, int b);

  // ens_servers.cpp
  void start_servers();
  void go_looking(int s, const std::string& why);
  void try_join(int s, std::uint64_t gen);
  void leader_loop(int s, std::uint64_t gen);
  void ping_followers(int s);
  void follow(int f, int l);
  void establish(int l, const std::vector<int>& quorum);
  Micros fsync_delay();
  Micros round_up(Micros t) const { return (t / cfg_.tick + 1) * cfg_.tick; }
  void follower_check(int s, std::uint64_t gen);
  void expiry_loop(int s, std::uint64_t gen);
  void mark_closing(int l, std::uint64_t session);
  void propose(int l, Txn t);
  void on_ack(int l, int f, std::uint64_t zxid);
  void on_proposal(int f, int l, Txn t);
  void on_commit(int f, std::uint64_t zxid);
  void on_ping(int f, int l);
  void on_ping_reply(int l, int f, std::set<std::uint64_t> touches);
  void leader_touch(int l, std::uint64_t session);
  void on_member_closed(int s, int peer);
  void kill(int s, Micros for_us);
  void pause(int proc, Micros for_us);

  // ens_db.cpp: the tree, watches, reads.
  void reset_db(Server& sv);
  void apply(int s, std::size_t upto, bool effects);
  Answer apply_node_txn(Server& sv, const Txn& t, std::vector<std::pair<std::string, bool>>& fired);
  Answer read(int s, int client, std::uint64_t req, const Op& op);
  void fire(int s, const std::vector<std::pair<std::string, bool>>& fired);
  void set_watches(int s, int client, std::uint64_t last_zxid, std::vector<WatchRec> watches);

  // ens_requests.cpp: a request's path through the servers.
  void answer_at(int s, std::uint64_t req, Answer a);  // a write's (or sync's) outcome at its origin
  void drain_fifo(int s, int client);
  void server_connect(int s, int client, std::uint64_t session, std::uint64_t req, std::uint64_t last_zxid);
  void finish_connect(int s, std::uint64_t req, std::uint64_t session, bool valid);
  void server_request(int s, int client, std::uint64_t session, std::uint64_t req, Op op);
  void lead_request(int l, int origin, int client, std::uint64_t session, std::uint64_t req, Op op);
  void reply_client(int s, int c, std::uint64_t req, Answer a);
  void close_client(int s, int client, bool expired);
  void revoke_one();  // the detector: a holder's node, with its record

  // ens_clients.cpp: connection, session, validity bound.
  void start_clients();
  void client_connect(int c);
  void client_tick(int c, std::uint64_t attempt);
  void on_connected(int c, std::uint64_t req, std::uint64_t session, bool expired);
  void on_client_closed(int c, bool expired);
  void on_answer(int c, std::uint64_t req, Answer a);
  std::uint64_t client_send(int c, Op op);
  void raise_bound(ClientState& cl, int kind, Micros sent, Micros answered);
  bool within_bound(const ClientState& cl) const;
  void lapse_check(ClientState& cl);
  void arm_lapse(ClientState& cl);
  void new_session(ClientState& cl);
  void connection_lost(ClientState& cl);

  // ens_shell.cpp, ens_shell_io.cpp: the lock machines' shell.
  void shell_tick(ClientState& cl);
  void start_machine(ClientState& cl, int lock);
  void feed(int id, detail::MachineEvent ev);
  void session_event(ClientState& cl, detail::MachineEvent::Kind kind, std::uint64_t epoch);
  void execute(int id, const detail::MachineRequest& r);
  void submit(int id, Op op, Route rt);
  void on_machine_answer(ClientState& cl, const Route& rt, const Answer& a, std::uint64_t req = 0);
  void run_commands(int id, const detail::MachineCommands& cmds);
  void settle(int id);
  void on_notify(int c, std::uint64_t watch, bool children, bool deleted);
  void on_outcome(int id, const detail::MachineOutcome& o);
  void hand_out(int id, const detail::MachineOutcome& o);
  bool lease_valid(const EnsMachine& m) const;
  void release_lease(ClientState& cl, int id);

  // ens_faults.cpp
  void schedule_faults();
  void inject(Micros until);
  void revoke_loop();
  void check_close(std::uint64_t session);
  void finish_checks();

  Config cfg_;
  zklock::sim::Rng rng_;
  zklock::sim::Rng stall_rng_;  // its own stream: with no stall, every other draw is as before
  zklock::sim::Rng shell_rng_;  // the lock users' choices
  Result res_;
  Micros now_ = 0;
  std::uint64_t seq_ = 0, next_session_ = 1, next_req_ = 1;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> q_;
  std::vector<Micros> offset_, ppm_, paused_until_;
  std::map<std::pair<int, int>, Link> links_;
  std::uint64_t link_gen_ = 0;
  std::vector<Server> servers_;
  std::vector<ClientState> clients_;
  std::deque<EnsMachine> machines_;
  std::deque<Agg> aggs_;
  std::map<std::string, int> by_guid_;          // the first 24 GUID digits -> machine
  std::set<std::string> revoked_;               // node paths the detector revoked
  std::vector<std::string> locks_;
  std::vector<std::pair<std::int64_t, std::int64_t>> last_token_;  // per lock: (czxid, ordinal)
  std::set<std::uint64_t> committed_;  // zxids any leader committed (a model check on elections)
  Micros tail_from_ = 0;    // the last fault healed (real)
  Micros settled_from_ = 0; // tail_from_ + settle time: the ensemble is quiet
  Micros end_ = 0, tail_len_ = 0;
  std::map<std::uint64_t, int> session_client_;  // session -> client
  bool stop_ = false;
};

constexpr int kServers = 3;

}  // namespace zklock::ensim
