// Mirror::Core: the mirror's state and the handlers of its ZooKeeper
// replies, shared with in-flight callbacks (internal to detector/; the
// contract is in mirror.hpp).
//
// mirror_core.cpp: the work queue, issuing reads, watches, (re)starts.
// mirror_apply.cpp: applying a listing or a node read to the state.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "detector/mirror.hpp"

namespace zklock::detector {

using Clock = std::chrono::steady_clock;

struct Mirror::Core : std::enable_shared_from_this<Mirror::Core> {
  // Invariants (under mu):
  //  (1) every Dir in `dirs` is the root or a descendant of a listed Dir;
  //  (2) every Node's lock is a Dir whose `locks` names it, and `index` holds
  //      one QueueNode per Node, under (Node::lock, child name), so a scan
  //      reads the index alone;
  //  (3) `listing` is true exactly while a list of that Dir is queued or in
  //      flight, `reading` exactly while a get of that Node is;
  //  (4) a Node is read (its get issued) only while its Dir has two or more
  //      lock nodes: a node alone in its queue holds and blocks nobody, so
  //      its index entry carries only what its name says (owner key, mode,
  //      sequence). Every apply of a listing that leaves a Dir with two or
  //      more lock nodes enqueues a get for each of them not read and not
  //      being read; a get that fails transiently is retried by the Dir's
  //      next listing (its watch, or the next resync). A read, once done,
  //      stays (node data never changes), also when the queue is lone again.
  struct Dir {
    std::size_t depth = 0;
    bool watch_armed = false;
    bool listing = false;
    bool relist = false;  // a watch fired while a list was in flight
    bool skipped = false;
    std::set<std::string> locks;    // child names that are lock nodes
    std::set<std::string> subdirs;  // child names that are directories
  };
  struct Node {
    std::string lock;
    bool have_stat = false;
    bool reading = false;
  };
  struct Work {
    enum Kind { list, get, watch_root } kind;
    std::string path;
    std::uint64_t generation;
    bool watch = false;
  };
  // Why the whole tree is listed again.
  enum class Restart {
    start,        // Mirror::start(): the load is timed
    new_session,  // every watch was lost: the re-mirror is timed
    resync,       // the periodic safety net: not timed
  };

  Core(Client& c, MirrorOptions o);

  Client& client;
  MirrorOptions opt;
  std::shared_ptr<spdlog::logger> log;
  Client::ListenerId listener = 0;

  mutable std::mutex mu;
  mutable std::condition_variable idle_cv;
  bool stopped = false;                    // GUARDED_BY(mu)
  std::uint64_t generation = 1;            // GUARDED_BY(mu): bumped per new session
  bool root_watch_armed = false;           // GUARDED_BY(mu)
  std::map<std::string, Dir> dirs;         // GUARDED_BY(mu)
  std::map<std::string, Node> nodes;       // GUARDED_BY(mu), by full path
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
  static std::string child_name(const std::string& dir, const std::string& path) {
    return path.substr(dir == "/" ? 1 : dir.size() + 1);
  }

  // --- under mu (mirror_core.cpp) ---
  void enqueue_list(const std::string& path, Dir& d);
  void enqueue_get(const std::string& path, Node& n);
  bool idle_locked() const { return queue.empty() && inflight == 0; }
  std::vector<Work> take_work();

  // --- under mu (mirror_apply.cpp) ---
  void erase_node(const std::string& dir, const std::string& name);
  void drop_content(const std::string& path, Dir& d);
  void forget_subtree(const std::string& path);
  void apply_list(const Work& w, Status s, const std::vector<std::string>& children);
  void apply_children(const std::string& path, Dir& d, const std::vector<std::string>& children);
  void read_contended(const std::string& path, const Dir& d);

  // --- without mu: callbacks and entry points ---
  void pump();
  void issue(Work w);
  void on_dir_watch(const std::string& path, std::uint64_t gen);
  void on_root_watch(std::uint64_t gen);
  void on_root_exists(const Work& w, Status s);
  void on_list(const Work& w, Status s, std::vector<std::string> children);
  void on_get(const Work& w, Status s, const std::string& data, const Stat& st);  // mirror_apply.cpp
  void restart_all(Restart why);
};

}  // namespace zklock::detector
