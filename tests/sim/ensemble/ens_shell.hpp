// The ensemble simulator's clients: the requests they send and the answers
// they get, what a client process keeps (its connection, session, validity
// bound, the C client's watch table) and what its shell keeps for each lock
// machine it runs (ens_world.hpp).
//
// The shell (ens_shell.cpp, ens_shell_io.cpp) is the counterpart of
// lib/src/lock_attempt*.cpp: it executes a machine's requests on the client's
// session, turns answers and watch notifications into the machine's events,
// stamps each event with the shell's clock reading (within_bound: the
// client's bound, from the library's own rule, is ahead of its local clock),
// and reports outcomes. It decides nothing: the hand-out is the machine's
// `granted` outcome (lock_machine.hpp, invariant 9).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "lock_machine.hpp"
#include "validity_rule.hpp"

namespace zklock::ensim {

using Micros = std::int64_t;
constexpr Micros kMs = 1000, kSec = 1000 * kMs;

// Client request kinds (also the server's answer kinds). Reads: children,
// get_data, exists; release: delete + setData(lock, marker) in one multi;
// probe: setData with a version no node has.
enum Kind : int { k_ping, k_connect, k_create, k_delete, k_heartbeat, k_sync, k_release, k_probe, k_children,
                  k_get_data, k_exists };
enum Rc : int { rc_ok, rc_expired, rc_moved, rc_no_node, rc_bad_version, rc_loss };  // rc_loss: the C client's own
inline bool is_read(int kind) { return kind == k_children || kind == k_get_data || kind == k_exists; }

struct Op {
  int kind = k_ping;
  std::string path;  // create: the prefix (the suffix is the parent's cversion)
  std::string data;  // create: the node's data; release: the marker
  bool watch = false;
};

struct Answer {
  int rc = rc_ok;
  std::uint64_t zxid = 0;    // the reply header's zxid: the write's, or the server's last applied
  std::int64_t czxid = 0;    // create, get_data, exists
  std::string name, data;    // create: the child's name; get_data: the data
  std::vector<std::string> children;
};

// Where an answer goes: the machine and the event it becomes.
struct Route {
  int machine = -1;
  std::uint64_t tag = 0;
  detail::MachineEvent::Kind kind{};
  int agg = -1;  // read_stats: several exists, answered together
  std::size_t part = 0;
  std::string path;    // a watching read's path
  bool watch = false;  // the read sets a watch (the C client keeps it once answered ok)
  bool children = false;
};

struct Agg {
  std::size_t want = 0, got = 0;
  std::vector<detail::NodeStat> stats;
};

// A watch the C client keeps for its session until it fires; re-set on
// every new connection (setWatches, relative to the last zxid seen).
struct WatchRec {
  std::uint64_t id = 0;  // the request that set it
  std::string path;
  bool children = false;
};

// One lock machine, and what its shell knows about it.
struct EnsMachine {
  std::unique_ptr<detail::LockMachine> m;
  int client = -1, lock = 0;
  std::uint64_t session = 0;
  std::string guid;
  bool leased = false;        // a lease is out (granted, not yet released by the user)
  std::pair<std::int64_t, std::int64_t> token{0, 0};
  std::string path;           // the granted node's path
  Micros handed_at = -1;      // real time of its latest hand-out
  std::uint64_t blocker_tag = 0;  // the latest watch_blocker, and since when (local) it waits on it
  Micros blocker_since = 0;
  Micros listed_at = -1;      // local: the step whose listing showed our node (LockMachine::confirmations)
  Micros confirm_due = -1;    // local: the retained node's confirming watchdog, when armed (retain_locked)
  bool finished = false;
};

enum class Want { idle, acquiring, holding };

struct ClientState {
  int id = 0;
  int server = -1;
  int pinned = -1;               // a connect string of one server (as in the stories), or -1: all three
  bool connected = false;
  std::uint64_t attempt = 0;     // connection attempts: older timers are void
  std::uint64_t conn = 0;        // connections made (the rule's "same connection")
  std::uint64_t connect_req = 0; // the current attempt's connect request: only its answer connects
  std::uint64_t session = 0;
  std::uint64_t last_zxid = 0;   // the latest zxid a reply carried (the C client's last_zxid)
  // Local: the first connect attempt for the session we have or ask for, as
  // the library's first bound starts from its handle's creation, before any
  // attempt leaves.
  std::optional<Micros> session_asked;
  Micros session_since = 0;  // real
  Micros bound = 0;              // valid_until, local clock; meaningful with a session
  bool have_bound = false;
  bool lapse_told = false;       // validity_expired was fed for the current bound
  detail::ValidityRule rule;
  std::deque<Micros> pairing;    // Rule::sync_pairing: sent times of ordered answers
  Micros last_sent = 0, last_heard = 0;
  struct Pending { int kind; Micros sent; std::uint64_t conn; Route route; bool machine; };
  std::map<std::uint64_t, Pending> inflight;
  bool hb_inflight = false;
  std::map<std::uint64_t, WatchRec> watches;   // by id
  std::map<std::uint64_t, Route> watch_routes;  // watch id -> the machine that set it
  // The user: one lock at a time, held for a while, then released (kept
  // idle when this client retains), then idle.
  bool retains = false;
  Want want = Want::idle;
  int lock = -1;                 // the lock wanted or held
  int active = -1;               // the machine acquiring or holding it
  int retained = -1;             // a machine whose node is kept idle
  Micros retain_until = 0;       // local
  Micros hold_until = 0, idle_until = 0;  // local
  Micros give_up_at = 0;         // local: the acquisition's deadline (0: none), then cancel
  Micros last_handout = -1;      // real
  std::vector<int> ms;           // machines of this client, not finished
};

}  // namespace zklock::ensim
