// The floor: the textbook ZooKeeper lock recipe written directly on the C
// API, with no library around it. Every zklock figure in zklock-bench is a
// ratio against this, measured in the same run on the same server.
//
//   acquire: create <lock>/lock- EPHEMERAL|SEQUENCE
//            loop: get children (no watch); lowest is ours -> held;
//                  else exists(predecessor, watch); gone -> loop;
//                  else wait for the watch, then loop (re-list on every wake)
//   release: delete our node
//
// Nodes carry no data and names are short ("lock-0000000042"): the floor
// is as cheap per byte as the recipe can be, and it has no GUID, no fencing
// token, no hand-off marker and no own-node watch (it cannot tell a revoked
// or expired lock from a held one). Those are what zklock pays for.
//
// Fairness: the session gets zoo_set_servers_resolution_delay(30 s), the
// same as zklock::Client's default (ClientOptions::resolution_delay); without
// it the C client re-resolves host names on every I/O loop and the floor
// would pay ~60 % more client CPU than it has to.
//
// Thread-safety: a FloorSession may be used from any thread (the C client's
// MT API). The blocking FloorLock calls must not run on the completion
// thread. Async callbacks run on the completion thread.
#pragma once

#include <zookeeper/zookeeper.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>

namespace zklock::bench {

// One raw C-client session. Watch and attempt contexts it hands to the C
// client are owned here and freed only after zookeeper_close, so no callback
// can outlive its context.
class FloorSession {
 public:
  // Connects and waits (bounded) for the session. Throws std::runtime_error.
  explicit FloorSession(const std::string& connect,
                        std::chrono::milliseconds session_timeout = std::chrono::seconds(10));
  ~FloorSession();
  FloorSession(const FloorSession&) = delete;
  FloorSession& operator=(const FloorSession&) = delete;

  zhandle_t* zh() const noexcept { return zh_; }
  // Creates `path` (persistent) and its ancestors; existing nodes are fine.
  void ensure_path(const std::string& path);

  struct Context;  // a C-client callback context, owned by the session
  Context* new_context();

 private:
  zhandle_t* zh_ = nullptr;
  std::mutex mu_;
  std::deque<std::unique_ptr<Context>> contexts_;  // GUARDED_BY(mu_)
};

// The blocking recipe on the synchronous C API: one thread per waiter.
class FloorLock {
 public:
  FloorLock(FloorSession& session, std::string lock_path);
  // Blocks until held (each wait bounded by `wait_limit`). Throws
  // std::runtime_error on any ZooKeeper error or a wait past the limit.
  void acquire(std::chrono::milliseconds wait_limit = std::chrono::seconds(60));
  // Deletes our node. Throws std::runtime_error on error.
  void release();

 private:
  FloorSession* session_;
  std::string path_;
  std::string node_;  // full path of our node while held
};

// The same recipe on the asynchronous C API, as a state machine driven by
// completions and watches: thousands of waiters on a few sessions, and a
// pipelined floor for one session. `granted` runs once on the completion
// thread with ZOK and our node's full path, or with the first error.
void floor_acquire_async(FloorSession& session, const std::string& lock_path,
                         std::function<void(int rc, const std::string& node)> granted);
// Deletes `node`; `done` runs on the completion thread.
void floor_release_async(FloorSession& session, const std::string& node, std::function<void(int rc)> done);

}  // namespace zklock::bench
