// The ensemble simulator: the validity bound against a timed model of a
// three-server ZooKeeper 3.8.0 ensemble.
//
// The recipe simulator (../sim_world.hpp) has one server and no clock; it
// takes "the lease is valid only while the session lives" as given. This one
// tests that premise. It models, in simulated time with a clock per process
// (rates within ±50 ppm):
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
//   - faults: a member partitioned, a leader cut in a gray way (the
//     followers reset, the leader's side silent), a leader->follower stream
//     held and then the follower->leader one too, a follower->leader
//     stream held alone (the leader keeps pinging), servers paused and
//     killed, client connections cut or silenced, clients paused.
// Each client runs the library's own validity rule (lib/src/validity_rule.hpp)
// on its committed writes, with heartbeats as the library sends them, and
// contends for one lock (ephemeral nodes in czxid order). Rule::sync_pairing
// is an older rule of the library: any leader-ordered answer (sync, or a
// write) paired with one a period later. Rule::chain_unanchored is the chain
// rule without its anchor: every chain counts, however late its k came back.
//
// Checked after every step that could break them:
//   V1  a lease is handed out while no other client's lease reports valid();
//   V2  a session's close commits only when its client's bound has passed;
//   V3  tokens (czxids) strictly increase in hand-out order;
//   L1  after the faults, every client is handed the lock again, and no lease
//       handed out on a settled ensemble lapses (the heartbeat keeps it up).
// One seed fixes everything; a failing seed replays exactly.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <queue>
#include <set>
#include <string>
#include <vector>

#include "sim_zk.hpp"  // Rng
#include "validity_rule.hpp"

namespace zklock::ensim {

using Micros = std::int64_t;
constexpr Micros kMs = 1000, kSec = 1000 * kMs;

enum class Rule { chain, sync_pairing, chain_unanchored };
const char* rule_name(Rule r);

struct Config {
  std::uint64_t seed = 1;
  Rule rule = Rule::chain;
  int clients = 4;
  // 0: chosen from the seed (see ens_world.cpp, kShapes).
  Micros tick = 0, timeout = 0;
  int sync_limit = 0;
  // The longest stall of the leader's expiry thread between polling a
  // session and marking it closing (real time). -1: a quarter tick, the most
  // the rule assumes (ValidityParams::expiry_stall); 0: one atomic step, and
  // then the run is the same as before the stall was modelled.
  Micros expiry_stall = -1;
  // Fault kinds drawn from (ens_faults.cpp): 9; 8 leaves out the newest, a
  // follower's stream to the leader held, as the model was before it.
  int fault_kinds = 9;
  Micros fault_time = 60 * kSec;  // faults during this; then a fault-free tail
  bool print_trace = false;
  std::size_t trace_keep = 60;
  bool check_liveness = true;  // L1 (off for rules that are not the library's)
  bool check_close = true;     // V2; without it a broken rule runs on until V1 sees the grant
};

struct Counters {
  std::uint64_t steps = 0, handouts = 0, lapses = 0, expiries = 0, elections = 0;
  std::uint64_t commits = 0, heartbeats = 0, syncs = 0, faults = 0;
  std::uint64_t window_writes = 0;  // writes prepared between a session's poll and its mark
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
enum class TxnKind { create_session, close_session, create_node, delete_node, heartbeat };
const char* txn_name(TxnKind k);

struct Txn {
  std::uint64_t zxid = 0;  // epoch << 32 | counter
  TxnKind kind{};
  std::uint64_t session = 0;
  int origin = -1;        // the server whose client sent it (answers it at apply)
  std::uint64_t req = 0;  // the client's request id
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
  std::map<std::uint64_t, std::uint64_t> queue;       // db: czxid -> session (the lock's children)
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
  std::map<std::uint64_t, int> waiting;               // request id -> client
  std::map<int, std::uint64_t> told;                  // client -> czxid it was told is the head
};

enum class Lock { idle, creating, queued, granted, holding, releasing };

struct ClientState {
  int id = 0;
  int server = -1;
  int pinned = -1;               // a connect string of one server (as in the stories), or -1: all three
  bool connected = false;
  std::uint64_t attempt = 0;     // connection attempts: older timers are void
  std::uint64_t conn = 0;        // connections made (the rule's "same connection")
  std::uint64_t connect_req = 0; // the current attempt's connect request: only its answer connects
  std::uint64_t session = 0;
  // Local: the first connect attempt for the session we have or ask for, as
  // the library's first bound starts from its handle's creation, before any
  // attempt leaves.
  std::optional<Micros> session_asked;
  Micros session_since = 0;  // real
  Micros bound = 0;              // valid_until, local clock; meaningful with a session
  bool have_bound = false;
  detail::ValidityRule rule;
  std::deque<Micros> pairing;    // Rule::sync_pairing: sent times of ordered answers
  Micros last_sent = 0, last_heard = 0;
  struct Pending { int kind; Micros sent; std::uint64_t conn; };
  std::map<std::uint64_t, Pending> inflight;
  bool hb_inflight = false;
  bool retry = false;            // a create or delete was refused (expired, moved): sent again
  Lock lock = Lock::idle;
  std::uint64_t node = 0;        // czxid of our node
  Micros hold_until = 0, idle_until = 0;  // local
  Micros handed_at = -1;         // real time of the last hand-out
  Micros last_handout = -1;
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
  void answer_at(int s, std::uint64_t req, int kind, int rc, std::uint64_t value);
  void server_connect(int s, int client, std::uint64_t session, std::uint64_t req);
  void finish_connect(int s, std::uint64_t req, std::uint64_t session, bool valid);
  Micros fsync_delay();
  Micros round_up(Micros t) const { return (t / cfg_.tick + 1) * cfg_.tick; }
  void follower_check(int s, std::uint64_t gen);
  void expiry_loop(int s, std::uint64_t gen);
  void mark_closing(int l, std::uint64_t session);
  void propose(int l, Txn t);
  void on_ack(int l, int f, std::uint64_t zxid);
  void on_proposal(int f, int l, Txn t);
  void on_commit(int f, std::uint64_t zxid);
  void apply(int s, std::size_t upto, bool effects);
  void on_ping(int f, int l);
  void on_ping_reply(int l, int f, std::set<std::uint64_t> touches);
  void leader_touch(int l, std::uint64_t session);
  void lead_request(int l, int origin, int client, std::uint64_t session, int kind, std::uint64_t req);
  void on_member_closed(int s, int peer);
  void server_request(int s, int client, std::uint64_t session, int kind, std::uint64_t req);
  void tell_heads(int s);
  void reply_client(int s, int client, int kind, std::uint64_t req, int rc, std::uint64_t value);
  void close_client(int s, int client, bool expired);
  void kill(int s, Micros for_us);
  void pause(int proc, Micros for_us);

  // ens_clients.cpp
  void start_clients();
  void client_connect(int c);
  void client_tick(int c, std::uint64_t attempt);
  void on_connected(int c, std::uint64_t req, std::uint64_t session, bool expired);
  void on_client_closed(int c, bool expired);
  void on_answer(int c, std::uint64_t req, int rc, std::uint64_t value);
  void on_head(int c, std::uint64_t czxid);
  void client_send(int c, int kind, std::uint64_t* id_out = nullptr);
  void raise_bound(ClientState& cl, int kind, Micros sent, Micros answered);
  bool valid(const ClientState& cl) const;
  void maybe_hand_out(ClientState& cl);
  void lapse_check(ClientState& cl);
  void new_session(ClientState& cl);

  // ens_faults.cpp
  void schedule_faults();
  void inject(Micros until);
  void check_close(std::uint64_t session);
  void finish_checks();

  Config cfg_;
  zklock::sim::Rng rng_;
  zklock::sim::Rng stall_rng_;  // its own stream: with no stall, every other draw is as before
  Result res_;
  Micros now_ = 0;
  std::uint64_t seq_ = 0, next_session_ = 1, next_req_ = 1;
  std::priority_queue<Event, std::vector<Event>, std::greater<Event>> q_;
  std::vector<Micros> offset_, ppm_, paused_until_;
  std::map<std::pair<int, int>, Link> links_;
  std::uint64_t link_gen_ = 0;
  std::vector<Server> servers_;
  std::vector<ClientState> clients_;
  std::set<std::uint64_t> committed_;  // zxids any leader committed (a model check on elections)
  std::uint64_t last_token_ = 0;
  Micros tail_from_ = 0;    // the last fault healed (real)
  Micros settled_from_ = 0; // tail_from_ + settle time: the ensemble is quiet
  Micros end_ = 0, tail_len_ = 0;
  std::map<std::uint64_t, int> session_client_;  // session -> client
  bool stop_ = false;
};

constexpr int kServers = 3;
// Client request kinds (also the server's answer kinds).
enum Kind : int { k_ping, k_connect, k_create, k_delete, k_heartbeat, k_sync };
enum Rc : int { rc_ok, rc_expired, rc_moved };

}  // namespace zklock::ensim
