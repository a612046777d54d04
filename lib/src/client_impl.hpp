// Internal: the implementation behind zklock::Client, shared with the recipes.
//
// Threads:
//  - the C client's I/O and completion threads (one pair per zhandle_t);
//    ZooKeeper callbacks and watches run on the completion thread;
//  - the timer thread: heartbeats, validity deadlines, session replacement,
//    recipe timeouts, and callbacks for operations that failed before being
//    sent (never run inline: an op issuer may hold its own lock);
//  - the callback thread: user-facing notifications (listeners, on_lost,
//    acquire_async completions), so user code never blocks ZooKeeper's thread.
//
// Invariants:
//  (1) `handle_` is swapped only under the exclusive `handle_mu_`; ops are
//      issued under the shared lock, so a zhandle_t is never closed while a
//      zoo_a* call on it is in progress, and is closed outside every lock.
//  (2) Every op context is freed exactly once: by its completion, or, when
//      the C client refused the request, by the deferred failure callback.
//  (3) valid_until_ only grows within one session epoch; it is reset to the
//      distant past when the session is lost. It grows only on evidence the
//      leader ordered (see note_ordered), never on a server's local answer.
//  (4) Once valid_until_ is in the past, validity_expired is emitted for that
//      bound before anything can raise it again (bound_mu_ serializes both).
#pragma once

#include <zookeeper/zookeeper.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <shared_mutex>
#include <thread>
#include <unordered_map>
#include <unordered_set>

#include <spdlog/spdlog.h>

#include "zklock/client.hpp"

namespace zklock {

// Session events seen by recipes. validity_expired: valid_until() passed —
// while disconnected, while paused, or with the connection intact — and no
// leader-ordered answer had raised it in time. Emitted once per lapse, always
// before the reconnected event or the answer that raises the bound again.
enum class SessionEvent { connected, suspended, reconnected, lost, validity_expired };

struct WatchCtx;

// Marks the current thread as running a zklock callback for `epoch`, so
// synchronous calls can refuse instead of deadlocking.
struct CallbackScope {
  explicit CallbackScope(std::uint64_t epoch);
  ~CallbackScope();
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;
  std::uint64_t prev_epoch;
  bool prev_in;
};
void free_watch_ctx(WatchCtx* w) noexcept;

// One zhandle_t and what hangs off it. Lives until closed by the Impl.
struct Handle {
  zhandle_t* zh = nullptr;
  Client::Impl* impl = nullptr;
  std::uint64_t epoch = 0;
  bool connected_once = false;  // completion thread only
  // Counts the session events seen on this handle (completion thread). Every
  // change of connection, to another server or the same one, passes through
  // one; the C client queues it ahead of every answer on the new connection.
  // So a request issued at count c and answered at count c was sent and
  // answered on one connection. (zoo_get_current_server() cannot tell: it
  // returns a static buffer the C client's I/O threads all write, and with
  // many clients in a process it misread a server change, ZOOKEEPER-4810.)
  std::atomic<std::uint64_t> connection{0};
  Clock::time_point started;
  std::mutex watches_mu;
  std::unordered_set<WatchCtx*> watches;  // GUARDED_BY(watches_mu)
  // Requests in flight: op context → "fail with ZCLOSING and free it".
  std::unordered_map<const void*, std::function<void()>> pending;  // GUARDED_BY(watches_mu)
};

struct Client::Impl {
  using ListenerId = Client::ListenerId;
  explicit Impl(ClientOptions o);
  ~Impl();

  void start();          // creates the first handle and waits (throws)
  void shutdown();       // idempotent; closes everything

  // --- op plumbing (client_ops.cpp) ---
  // Runs `issue(zh)` under the shared handle lock. When it returns non-ZOK
  // (nothing will call the completion), `fail(rc)` runs on the timer thread.
  void issue(const std::function<int(zhandle_t*, Handle*)>& issue, std::function<void(int)> fail);
  const ACL_vector* acl() const { return &acl_vector_; }

  // Recipes learn which session an answer belongs to from this, valid inside
  // a ZooKeeper callback only.
  static std::uint64_t callback_epoch() noexcept;
  static bool in_callback() noexcept;

  // Called for a server answer that the leader ordered after `sent` (a write
  // of ours, or the read pipelined behind our sync), to a request issued on
  // `h` at connection count `connection` (Handle::connection). Raises the
  // bound (see session.cpp: the proof needs an earlier such answer on the
  // same connection, at least one heartbeat period before).
  void note_ordered(Handle* h, Clock::time_point sent, std::uint64_t connection);
  // The heartbeat: sync("/") and exists("/") pipelined; `done(ordered)` runs
  // on the completion thread (or the timer thread when unsent).
  void sync_then_read(std::function<void(bool ordered)> done);
  // The heartbeat period: a third of the negotiated timeout (at least 10 ms).
  std::chrono::milliseconds heartbeat_period() const;

  // --- events (session.cpp) ---
  void on_session_event(Handle* h, int state);
  using ObserverId = std::uint64_t;
  // Observers run inline on the thread that saw the event (completion or
  // timer thread): they must not block.
  ObserverId observe(std::function<void(SessionEvent, std::uint64_t epoch)> fn);
  void unobserve(ObserverId id);

  // --- timer thread ---
  using TimerId = std::uint64_t;
  TimerId schedule_at(Clock::time_point when, std::function<void()> fn);
  TimerId defer(std::function<void()> fn) { return schedule_at(Clock::time_point::min(), std::move(fn)); }
  void cancel(TimerId id);
  void post_user(std::function<void()> fn);

  std::uint64_t epoch() const { return epoch_.load(); }
  std::chrono::milliseconds negotiated() const {
    std::lock_guard lk(mu_);
    return negotiated_;
  }
  std::int64_t session_id() const {
    std::lock_guard lk(mu_);
    return session_id_;
  }
  bool connected() const {
    std::lock_guard lk(mu_);
    return has_session_ && (state_ == ConnectionState::connected || state_ == ConnectionState::reconnected);
  }

  // --- asynchronous operations (client_ops.cpp); see client.hpp ---
  void create(std::string path, std::string data, CreateMode mode,
              std::function<void(Status, const std::string&, const Stat&)> done);
  void get_children(std::string path, Watcher watch,
                    std::function<void(Status, std::vector<std::string>)> done);
  void exists(std::string path, Watcher watch, std::function<void(Status, const Stat&)> done);
  void get(std::string path, Watcher watch, std::function<void(Status, std::string, const Stat&)> done);
  void set_data(std::string path, std::string data, int version, std::function<void(Status, const Stat&)> done);
  void remove(std::string path, int version, std::function<void(Status)> done);
  void multi(std::vector<Op> ops, std::function<void(Status, std::vector<OpResult>)> done);
  // Always answers from another thread, so `done` may take the caller's locks.
  // Data that is not a UUID fail with Errc::protocol_error.
  void ensemble_id_async(std::function<void(Status, const std::string&)> done);
  // The id cached for the current session, or empty: lets a caller that holds
  // no locks skip ensemble_id_async's thread hop on the hot path.
  std::string cached_ensemble_id() const {
    std::lock_guard lk(mu_);
    return ensemble_epoch_ == epoch() ? ensemble_id_ : std::string();
  }
  Clock::time_point valid_until() const {
    return Clock::time_point(Clock::duration(valid_until_.load()));
  }
  std::shared_ptr<spdlog::logger> log;
  ClientOptions opts;
  std::string owner_prefix;

  // state, guarded by mu_
  mutable std::mutex mu_;
  mutable std::condition_variable state_cv_;
  ConnectionState state_ = ConnectionState::suspended;
  bool has_session_ = false;
  std::int64_t session_id_ = 0;
  std::chrono::milliseconds negotiated_{0};
  std::map<ListenerId, std::function<void(ConnectionState)>> listeners_;
  ListenerId next_listener_ = 1;
  std::map<ObserverId, std::function<void(SessionEvent, std::uint64_t)>> observers_;
  ObserverId next_observer_ = 1;
  std::string ensemble_id_;  // cached for ensemble_epoch_
  std::uint64_t ensemble_epoch_ = 0;
  // One read of the ensemble id for session `ep`; on ZNONODE creates it and
  // reads again, at most `attempts_left` more times (ensemble_id_async).
  void read_ensemble_id(std::uint64_t ep, int attempts_left,
                        std::shared_ptr<std::function<void(Status, const std::string&)>> done);

  std::atomic<std::uint64_t> epoch_{0};
  std::atomic<Clock::rep> valid_until_{Clock::time_point::min().time_since_epoch().count()};
  std::atomic<bool> closing_{false};
  std::atomic<std::uint64_t> heartbeat_gen_{0};  // the live heartbeat chain

 private:
  friend class Client;
  Handle* open_handle();                 // zookeeper_init; throws on bad input
  void replace_session();                // timer thread, after expiry
  void close_handle(Handle* h);          // outside all locks
  void heartbeat(std::uint64_t epoch, std::uint64_t gen);  // timer thread
  void check_validity(std::uint64_t epoch);
  // Emits validity_expired once if the bound has passed. REQUIRES bound_mu_.
  void report_lapse_locked(std::uint64_t epoch);
  void emit(SessionEvent ev, std::uint64_t epoch);
  void timer_loop();
  void callback_loop();
  std::chrono::milliseconds margin() const;

  std::shared_mutex handle_mu_;
  Handle* handle_ = nullptr;  // GUARDED_BY(handle_mu_)

  // The bound's evidence: send times of leader-ordered answers on connection
  // evidence_connection_, oldest first; and the bound whose lapse was reported.
  std::mutex bound_mu_;
  std::deque<Clock::time_point> evidence_;                                  // GUARDED_BY(bound_mu_)
  std::uint64_t evidence_connection_ = 0;                                   // GUARDED_BY(bound_mu_)
  std::uint64_t evidence_epoch_ = 0;                                        // GUARDED_BY(bound_mu_)
  Clock::rep lapse_reported_for_ = Clock::time_point::min().time_since_epoch().count();  // GUARDED_BY(bound_mu_)

  ACL_vector acl_vector_{};
  std::vector<ACL> acl_entries_;
  std::vector<std::string> acl_strings_;

  std::mutex timer_mu_;
  std::condition_variable timer_cv_;
  std::multimap<Clock::time_point, std::pair<TimerId, std::function<void()>>> timers_;
  TimerId next_timer_ = 1;
  bool timer_stop_ = false;
  std::thread timer_thread_;

  std::mutex user_mu_;
  std::condition_variable user_cv_;
  std::deque<std::function<void()>> user_queue_;
  bool user_stop_ = false;
  std::thread user_thread_;
};

}  // namespace zklock

namespace zklock::detail {

// How zklock's recipes reach a Client's implementation: Client befriends this
// type, so the public header needs no accessor a user could call.
struct ClientAccess {
  static const std::shared_ptr<Client::Impl>& impl(const Client& c) noexcept { return c.impl_; }
};

}  // namespace zklock::detail
