// Mirror::Core: the mirror's state and the handlers of its ZooKeeper
// replies, shared with in-flight callbacks (internal to detector/; the
// contract is in mirror.hpp).
//
// mirror_core.cpp: the work queue, issuing reads, watches, (re)starts.
// mirror_sessions.cpp: the sessions and their watch budget.
// mirror_apply.cpp: applying a listing or a node read to the state.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "detector/mirror.hpp"

namespace zklock::detector {

using Clock = std::chrono::steady_clock;

struct Mirror::Core : std::enable_shared_from_this<Mirror::Core> {
  // Invariants (under mu):
  //  (1) every Dir in `dirs` is the root or a descendant of a listed Dir;
  //  (2) `index` holds one node per entry of a Dir's `locks`, under (the
  //      Dir's path, child name), so a scan reads the index alone;
  //  (3) `listing` is true exactly while a list of that Dir is queued, in
  //      flight or parked, `reading` exactly while a get of that Node is
  //      queued or in flight (NodeState::reading);
  //  (4) a Node is read (its get issued) only while its Dir has two or more
  //      lock nodes: a node alone in its queue holds and blocks nobody, so
  //      its index entry carries only what its name says (owner key, mode,
  //      sequence). Every apply of a listing that leaves a Dir with two or
  //      more lock nodes enqueues a get for each of them not read and not
  //      being read; a get that fails transiently is retried by the Dir's
  //      next listing (its watch, its session's reconnect, or the next
  //      resync). A read, once done,
  //      stays (node data never changes), also when the queue is lone again.
  //  (5) a Dir's session is kNoSession until it is first enqueued, then one
  //      index into `sessions` for as long as the Dir lives: its list, watch
  //      and node reads go to that session only. A Dir enqueued while every
  //      session is full waits in `parked` (listing set) for a new one.
  //  (6) a Session's `bytes` is the watch_cost() of every Dir on it plus
  //      `orphan`: the cost of Dirs forgotten while their watch was armed,
  //      released when that watch fires (or the session is replaced). It
  //      stays within the budget, except for a session's first Dir.
  static constexpr std::uint32_t kNoSession = ~std::uint32_t{0};
  // A lock node's read, kept beside its name in its Dir: the node's path is
  // the Dir's path and the name, and is not stored again.
  struct NodeState {
    bool have_stat = false;
    bool reading = false;
  };
  // A mirrored znode. Nearly every Dir is a lock path with one lock node
  // and no subdirectory, so its children are kept in sorted vectors (no
  // tree node per child).
  struct Dir {
    std::uint32_t depth = 0;
    std::uint32_t session = kNoSession;  // invariant (5)
    bool watch_armed = false;
    bool listing = false;
    bool relist = false;  // a watch fired while a list was in flight
    bool skipped = false;
    std::vector<std::pair<std::string, NodeState>> locks;  // lock nodes' child names, sorted
    std::vector<std::string> subdirs;                       // directories' child names, sorted

    NodeState* lock(const std::string& name);  // null when absent
    bool has_subdir(const std::string& name) const;
  };
  // One ZooKeeper session the mirror watches through: sessions[0] is the
  // Client the Mirror was given, the others the Mirror opened.
  struct Session {
    Client* client = nullptr;
    std::unique_ptr<Client> owned;  // null for sessions[0]; destroyed by ~Mirror
    Client::ListenerId listener = 0;
    std::uint64_t epoch = 0;        // client->session_epoch() that `generation` watches on
    std::uint64_t generation = 1;   // bumped when the session is replaced: its watches are gone
    std::size_t bytes = 0;          // invariant (6)
    std::size_t orphan = 0;
    // Dirs whose list or node read failed on a lost connection: listed
    // again when the session reconnects (their watch was not set). At most
    // one entry per failed read.
    std::vector<std::string> retry;
  };
  struct Work {
    enum Kind { list, get, watch_root } kind;
    std::string path;
    std::uint32_t session;
    std::uint64_t generation;  // the session's, when enqueued
    bool watch = false;
    Client* client = nullptr;  // set by take_work
  };
  // Why the whole tree is listed again.
  enum class Restart {
    start,   // Mirror::start(): the load is timed
    resync,  // the periodic safety net: not timed
  };

  Core(Client& c, MirrorOptions o);

  Client& client;
  MirrorOptions opt;
  std::shared_ptr<spdlog::logger> log;
  Client::ListenerId listener = 0;

  const std::string chroot;        // of client's connect string ("" for none)
  const std::size_t budget;        // client.options().watch_budget_bytes

  mutable std::mutex mu;
  mutable std::condition_variable idle_cv;
  std::condition_variable session_cv;      // the opener, and start() for the load sessions, wait on it
  std::condition_variable issued_cv;       // ~Mirror waits on it for issuing == 0
  bool stopped = false;                    // GUARDED_BY(mu)
  std::vector<std::unique_ptr<Session>> sessions;  // GUARDED_BY(mu), never shrinks
  std::vector<std::string> parked;         // GUARDED_BY(mu): invariant (5)
  bool want_session = false;               // GUARDED_BY(mu): the opener should open one (also while fewer than opt.load_sessions)
  std::size_t issuing = 0;                 // GUARDED_BY(mu): pumps issuing a batch
  bool root_watch_armed = false;           // GUARDED_BY(mu)
  std::map<std::string, Dir> dirs;         // GUARDED_BY(mu)
  model::LockIndex index;                  // GUARDED_BY(mu): the nodes' queues
  std::deque<Work> queue;                  // GUARDED_BY(mu)
  std::size_t inflight = 0;                // GUARDED_BY(mu)
  MirrorStats stats;                       // GUARDED_BY(mu), counters and the load time
  // GUARDED_BY(mu): set by a timed restart, cleared (and stats.load_seconds
  // set) when the mirror is next idle.
  std::optional<Clock::time_point> load_started;

  static std::string child_path(const std::string& dir, const std::string& name) {
    return dir == "/" ? "/" + name : dir + "/" + name;
  }
  // "/a/b/n" -> {"/a/b", "n"}; "/n" -> {"/", "n"}.
  static std::pair<std::string, std::string> split(const std::string& path) {
    const auto slash = path.rfind('/');
    return {slash == 0 ? std::string("/") : path.substr(0, slash), path.substr(slash + 1)};
  }

  // --- under mu (mirror_core.cpp) ---
  void enqueue_list(const std::string& path, Dir& d);
  void enqueue_get(const std::string& path, NodeState& n, const Dir& d);
  bool idle_locked() const { return queue.empty() && inflight == 0 && parked.empty(); }
  bool current(const Work& w) const { return !stopped && w.generation == sessions[w.session]->generation; }
  std::vector<Work> take_work();

  // --- under mu (mirror_sessions.cpp) ---
  std::size_t watch_cost(const std::string& path) const;
  bool assign_session(const std::string& path, Dir& d);
  void release_dir(const std::string& path, const Dir& d);  // d is being forgotten
  void release_orphan(std::uint32_t session, const std::string& path);
  void unpark();

  // --- under mu (mirror_apply.cpp) ---
  void erase_node(const std::string& dir, const std::string& name);
  void drop_content(const std::string& path, Dir& d);
  void forget_subtree(const std::string& path);
  void apply_list(const Work& w, Status s, const std::vector<std::string>& children);
  void apply_children(const std::string& path, Dir& d, const std::vector<std::string>& children);
  void read_contended(const std::string& path, Dir& d);

  // --- without mu: callbacks and entry points ---
  void pump();
  static void give_back_free_memory();  // after a load: see mirror_core.cpp
  void issue(Work w);
  void on_dir_watch(const std::string& path, std::uint32_t session, std::uint64_t gen);
  void on_root_watch(std::uint32_t session, std::uint64_t gen);
  void on_root_exists(const Work& w, Status s);
  void on_list(const Work& w, Status s, std::vector<std::string> children);
  void on_get(const Work& w, Status s, const std::string& data, const Stat& st);  // mirror_apply.cpp
  void restart_all(Restart why);

  // --- without mu (mirror_sessions.cpp) ---
  // Listens for a replacement of sessions[index] (held by `c`).
  Client::ListenerId listen(Client& c, std::uint32_t index);
  // sessions[index] may have been replaced: if so, re-list its directories.
  void on_connected(std::uint32_t index);
  // sessions[index] is back: re-list what failed while it was away.
  void on_reconnected(std::uint32_t index);
  // The opener thread's loop: opens a Client whenever want_session.
  void open_sessions();
  // For ~Mirror: stops, waits for pumps, hands back what must be closed.
  std::vector<std::pair<Client*, Client::ListenerId>> stop(std::vector<std::unique_ptr<Client>>& owned);
};

}  // namespace zklock::detector
