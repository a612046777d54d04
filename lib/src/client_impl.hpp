// Internal: the implementation behind zklock::Client, the one interface the recipes include.
//
// Where each part lives: the session (connect, states, expiry and replacement)
// in session.cpp; heartbeats and the validity bound in validity_bound.cpp; the
// asynchronous operations in client_ops.cpp, all through the one template of
// async_op.hpp; the ensemble id in ensemble_id.cpp; timers and the callback
// thread in executor.hpp; the zhandle_t and what hangs off it in handle.hpp;
// the C client's log in zk_log.hpp.
//
// Threads:
//  - the C client's I/O and completion threads (one pair per zhandle_t);
//    ZooKeeper callbacks and watches run on the completion thread;
//  - the timer thread (the Executor's): heartbeats, validity deadlines,
//    session replacement, recipe timeouts, and callbacks for operations that
//    failed before being sent (never run inline: an op issuer may hold its
//    own lock);
//  - the callback thread (the Executor's): user-facing notifications
//    (listeners, on_lost, acquire_async completions), so user code never
//    blocks ZooKeeper's thread.
//
// Invariants:
//  (1) `handle_` is swapped only under the exclusive `handle_mu_`; ops are
//      issued under the shared lock, so a zhandle_t is never closed while a
//      zoo_a* call on it is in progress, and a Handle is destroyed (which
//      closes its zhandle_t) outside every lock.
//  (2) Every op context is freed, and its callback run, exactly once: by its
//      completion; or, when the C client refused the request, freed at once
//      and failed by a deferred callback; or, when the C client dropped it at
//      close, failed with ZCLOSING and freed by the Handle's destructor
//      (async_op.hpp).
//  (3) valid_until_ only grows within one session epoch; it is reset to the
//      distant past when the session is lost. It grows only on writes of
//      ours that a quorum committed, by the rule of validity_rule.hpp (see
//      note_committed), never on a read or a server's local answer.
//  (4) Once valid_until_ is in the past, validity_expired is emitted for that
//      bound before anything can raise it again (bound_mu_ serializes both).
#pragma once

#include <zookeeper/zookeeper.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <type_traits>
#include <vector>

#include <spdlog/spdlog.h>

#include "clock.hpp"
#include "executor.hpp"
#include "handle.hpp"
#include "validity_rule.hpp"
#include "zklock/client.hpp"

namespace zklock {
namespace detail {
struct AttemptTables;
class SessionShards;

// Test-only: when set, Client::Impl::valid_until_of calls it between its
// first load of the epoch and its load of the bound, with the epoch asked
// for. A test changes the session there (tests/loss/bound_read_test.cpp);
// the read must then answer min(). Null in production: one load per read.
struct BoundReadHookForTest {
  virtual ~BoundReadHookForTest() = default;
  virtual void between_loads(std::uint64_t epoch) = 0;
};
inline std::atomic<BoundReadHookForTest*> g_bound_read_hook_for_test{nullptr};
}  // namespace detail

// Session events seen by recipes. validity_expired: valid_until() passed —
// while disconnected, while paused, or with the connection intact — and no
// committed write had raised it in time. Emitted once per lapse, always
// before the reconnected event or the answer that raises the bound again.
// validity_proven: the bound was raised from the past (or from nothing)
// into the future; a grant held back until it is provable goes out then.
enum class SessionEvent { connected, suspended, reconnected, lost, validity_expired, validity_proven };

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

// The ACL put on every node zklock creates, built once from ClientOptions
// (client_ops.cpp). Not copyable: the C structs point into its own strings,
// which outlive every request that references them.
class AclList {
 public:
  explicit AclList(const ClientOptions& o);
  AclList(const AclList&) = delete;
  AclList& operator=(const AclList&) = delete;
  const ACL_vector* get() const { return &vector_; }

 private:
  ACL_vector vector_{};
  std::vector<ACL> entries_;
  std::vector<std::string> strings_;
};

struct Client::Impl {
  using ListenerId = Client::ListenerId;
  explicit Impl(ClientOptions o);
  // Another session behind the same Client (session_pool.hpp, invariant 3):
  // `primary`'s options, server settings and attempt tables; epochs
  // `index` << 32 onwards.
  Impl(const Impl& primary, std::uint32_t index);
  ~Impl();

  void start();          // creates the first handle and waits (throws)
  void shutdown();       // idempotent; closes everything (the other sessions too)

  // --- the watch budget (session_pool.hpp) ---
  // Seats `bytes` of a lock attempt's watches on this session if they fit
  // under ClientOptions::watch_budget_bytes; unseat() gives them back.
  bool try_seat(std::size_t bytes);
  void seat_unchecked(std::size_t bytes) { seated_bytes_.fetch_add(bytes, std::memory_order_relaxed); }
  void unseat(std::size_t bytes) { seated_bytes_.fetch_sub(bytes, std::memory_order_relaxed); }
  std::size_t seated_bytes() const { return seated_bytes_.load(std::memory_order_relaxed); }

  // --- op plumbing (async_op.cpp) ---
  // A callable borrowed for the length of one issue() call: no allocation.
  class IssueFn {
   public:
    template <class F>
    IssueFn(F&& f) noexcept  // NOLINT(google-explicit-constructor): a lambda converts
        : obj_(const_cast<void*>(static_cast<const void*>(std::addressof(f)))),
          call_([](void* o, zhandle_t* zh, Handle* h) {
            return (*static_cast<std::remove_reference_t<F>*>(o))(zh, h);
          }) {}
    int operator()(zhandle_t* zh, Handle* h) const { return call_(obj_, zh, h); }

   private:
    void* obj_;
    int (*call_)(void*, zhandle_t*, Handle*);
  };
  // Runs `fn(zh, h)` under the shared handle lock and returns its code, or
  // without running it: ZCLOSING when there is no handle, ZSESSIONEXPIRED
  // when `session` names a session (an epoch) that is not the current one.
  // On a non-ZOK code nothing will call the completion: the caller fails its
  // request, and never inline (async_op.hpp: on the timer thread), since an
  // op issuer may hold its own lock.
  int issue(IssueFn fn, std::uint64_t session = kAnySession);
  const ACL_vector* acl() const { return acl_.get(); }
  // What this client holds now (diagnostics and tests): watch callbacks of
  // the current session not yet fired (one per watching call, as the C
  // client keeps them), requests not yet answered, and timers not yet run.
  // After use, each must come back to what an idle client holds. A Client's
  // first session counts every session behind the Client.
  struct Census {
    std::size_t watches = 0, requests = 0, timers = 0;
  };
  Census census();
  std::size_t armed_watches() { return census().watches; }

  // Recipes learn which session an answer belongs to from this, valid inside
  // a ZooKeeper callback only.
  static std::uint64_t callback_epoch() noexcept;
  static bool in_callback() noexcept;

  // Called, now, for the answer to a write of ours issued at `sent` on `h` at
  // connection count `connection` (Handle::connection) whose code a quorum
  // committed (quorum_committed). Raises the bound by the rule of
  // validity_rule.hpp: it needs a chain of three such answers on one
  // connection.
  void note_committed(Handle* h, Clock::time_point sent, std::uint64_t connection);
  // The heartbeat period (ValidityParams::heartbeat_period).
  std::chrono::milliseconds heartbeat_period() const;
  // Heartbeat writes this client has sent, over all its sessions: at most one
  // per heartbeat period, none in a period with another committed write.
  std::uint64_t heartbeat_writes() const { return heartbeat_writes_.load(); }
  // A write's version no node can have (versions are >= 0; -1 means any):
  // the heartbeat's and the waiting watchdog's probe.
  static constexpr int kImpossibleVersion = -2;
  // The waiting watchdog's base period (ClientOptions::wait_check).
  std::chrono::milliseconds wait_check_period() const;
  // A waiter found its server listing a node the leader says is gone
  // (lock_machine.hpp, invariant 7): logged at warning, counted
  // (Client::diverged_servers_seen), told to the observer.
  void note_diverged(const std::string& lock_path, const std::string& detail);
  std::uint64_t diverged_seen() const { return diverged_seen_.load(); }
  // Completion thread, at a session event that closes a connection of `h`:
  // feeds the reconnect-loop rule (reconnect_loop.hpp). True when the session
  // is looping: then `h` is abandoned, and the loop logged at error, counted
  // (Client::reconnect_loops_seen) and told to the observer; the caller ends
  // the session as after expiry (reconnect_loop.cpp).
  bool connection_closed(Handle* h);
  std::uint64_t reconnect_loops_seen() const { return reconnect_loops_.load(); }
  // The ensemble's settings the bound depends on, read at start (conf) or
  // given (ClientOptions::server_tick_time); tick 0 when neither worked.
  struct ServerSettings {
    std::chrono::milliseconds tick{0}, min_session{0}, max_session{0};
    int sync_limit = 0;
    bool read = false;  // from `conf`, not from the options
  };

  // --- events (session.cpp; the bound's in validity_bound.cpp) ---
  void on_session_event(Handle* h, int state);
  using ObserverId = std::uint64_t;
  // Observers run inline on the thread that saw the event (completion or
  // timer thread): they must not block.
  ObserverId observe(std::function<void(SessionEvent, std::uint64_t epoch)> fn);
  void unobserve(ObserverId id);

  // --- the Executor's threads (executor.hpp); timer tasks run inside a
  // CallbackScope of the current epoch ---
  using TimerId = Executor::TimerId;
  TimerId schedule_at(Clock::time_point when, std::function<void()> fn) {
    return executor_.schedule_at(when, std::move(fn));
  }
  TimerId defer(std::function<void()> fn) { return executor_.defer(std::move(fn)); }
  void cancel(TimerId id) { executor_.cancel(id); }
  void post_user(std::function<void()> fn) { executor_.post(std::move(fn)); }

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

  // --- asynchronous operations (client_ops.cpp, ensemble_id.cpp); see client.hpp ---
  // `session`: kAnySession, or the epoch of the one session the request may
  // go out on. The check and the send are one step under the handle lock
  // that replace_session() takes exclusively, so a request pinned to a
  // session that has been replaced is answered ZSESSIONEXPIRED and never
  // reaches its successor. A caller that checked epoch() first still needs
  // the pin: the session can be replaced between its check and the send,
  // and a create sent on the successor makes a node that outlives the
  // attempt that asked for it (the attempt believes its session over).
  static constexpr std::uint64_t kAnySession = 0;
  void create(std::string path, std::string data, CreateMode mode,
              std::function<void(Status, const std::string&, const Stat&)> done,
              std::uint64_t session = kAnySession);
  void get_children(std::string path, Watcher watch, std::function<void(Status, std::vector<std::string>)> done,
                    std::uint64_t session = kAnySession);
  void exists(std::string path, Watcher watch, std::function<void(Status, const Stat&)> done,
              std::uint64_t session = kAnySession);
  // A data watch armed by get(): which session, which callback (a key only,
  // never dereferenced unless still registered), and a unique id against a
  // reused address. Empty (ctx null) when no watch was armed.
  struct WatchRef {
    std::uint64_t epoch = 0;
    const void* ctx = nullptr;
    std::uint64_t id = 0;
    std::string path;
  };
  void get(std::string path, Watcher watch, std::function<void(Status, std::string, const Stat&)> done,
           WatchRef* armed = nullptr, std::uint64_t session = kAnySession);
  // Takes back a data watch of get() that has not fired: the C client forgets
  // the callback at once, locally, with no request (the server's watch, if
  // any, fires later to nobody). A no-op for a watch that fired, or of
  // another session. A waiter that gives up uses it, so the node it waited
  // for does not collect one callback per abandoned wait until it goes.
  void unwatch(const WatchRef& ref);
  void set_data(std::string path, std::string data, int version, std::function<void(Status, const Stat&)> done,
                std::uint64_t session = kAnySession);
  void remove(std::string path, int version, std::function<void(Status)> done, std::uint64_t session = kAnySession);
  void multi(std::vector<Op> ops, std::function<void(Status, std::vector<OpResult>)> done,
             std::uint64_t session = kAnySession);
  // Always answers from another thread, so `done` may take the caller's locks.
  // Data that is not a UUID fail with Errc::protocol_error.
  void ensemble_id_async(std::function<void(Status, const std::string&)> done);
  // The id cached for the current session, or empty: lets a caller that holds
  // no locks skip ensemble_id_async's thread hop on the hot path.
  std::string cached_ensemble_id() const {
    std::lock_guard lk(mu_);
    return ensemble_epoch_ == epoch() ? ensemble_id_ : std::string();
  }
  // The settings cannot prove a bound for this session: valid_until() stays
  // in the past, and nothing waits for it (lock_machine.hpp, invariant 9).
  bool validity_refused() const { return validity_refused_.load(); }
  Clock::time_point valid_until() const {
    return Clock::time_point(Clock::duration(valid_until_.load()));
  }
  // The bound of session `epoch` (a lease's), or min() when that session is
  // not the current one: the epoch, the bound, the epoch again. A new
  // session stores its epoch (replace_session) before its first bound (its
  // CONNECTED), so a bound read between two loads of the same epoch is that
  // session's; one read in two steps could straddle an expiry, the
  // replacement and its CONNECTED, and give the old lease the new bound.
  Clock::time_point valid_until_of(std::uint64_t epoch) const {
    if (epoch_.load() != epoch) return Clock::time_point::min();
    if (auto* hook = detail::g_bound_read_hook_for_test.load(std::memory_order_relaxed)) hook->between_loads(epoch);
    const auto bound = valid_until();
    return epoch_.load() == epoch ? bound : Clock::time_point::min();
  }
  std::shared_ptr<spdlog::logger> log;
  ClientOptions opts;
  std::string owner_prefix;
  // The lock recipe's tables for this client (attempt_tables.hpp). Declared
  // before the handle and the executor, so it outlives their last callbacks.
  const std::shared_ptr<detail::AttemptTables> attempt_tables;
  // The sessions beyond this one: set on a Client's first session only.
  const std::unique_ptr<detail::SessionShards> shards;

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
  std::unique_ptr<Handle> open_handle();  // zookeeper_init; throws on bad input
  void replace_session();                 // timer thread, after expiry
  void heartbeat(std::uint64_t epoch, std::uint64_t gen);  // timer thread
  void check_validity(std::uint64_t epoch);
  // Reads the settings (session.cpp): ClientOptions, else `conf` from the
  // servers of the connect string. Blocking, bounded; before the first handle.
  void read_server_settings();
  // The rule's parameters for the session just connected (negotiated_ set);
  // logs and refuses (returns false) when they cannot prove a bound.
  bool validity_params(detail::ValidityParams* out);
  // Emits validity_expired once if the bound has passed. REQUIRES bound_mu_.
  void report_lapse_locked(std::uint64_t epoch);
  void emit(SessionEvent ev, std::uint64_t epoch);
  std::chrono::milliseconds margin() const;

  std::shared_mutex handle_mu_;
  std::unique_ptr<Handle> handle_;  // GUARDED_BY(handle_mu_)

  // The bound's evidence (the rule keeps the committed answers of the
  // current connection), the epoch it belongs to, and the bound whose lapse
  // was reported. validity_refused_: the settings cannot prove a bound for
  // this session (validity_params), so nothing raises it.
  std::mutex bound_mu_;
  detail::ValidityRule rule_;                                               // GUARDED_BY(bound_mu_)
  std::uint64_t evidence_epoch_ = 0;                                        // GUARDED_BY(bound_mu_)
  // Written under bound_mu_; atomic so that a recipe holding its own lock
  // may read it (validity_refused()) without taking bound_mu_, which is
  // taken before recipe locks (report_lapse_locked emits under it).
  std::atomic<bool> validity_refused_{false};
  ServerSettings settings_;  // written by start() before the first handle, then read only
  bool settings_given_ = false;  // another session's (session_pool.hpp): start() reads none
  std::atomic<std::uint64_t> heartbeat_writes_{0};
  std::atomic<std::uint64_t> diverged_seen_{0};
  std::atomic<std::size_t> seated_bytes_{0};
  std::atomic<std::uint64_t> reconnect_loops_{0};
  std::atomic<Clock::rep> heartbeat_period_{std::chrono::duration_cast<Clock::duration>(std::chrono::seconds(1)).count()};
  Clock::rep lapse_reported_for_ = Clock::time_point::min().time_since_epoch().count();  // GUARDED_BY(bound_mu_)

  AclList acl_;
  // Last member, so destroyed first: its threads end before what they use.
  Executor executor_;
};

}  // namespace zklock

namespace zklock::detail {

// How zklock's recipes reach a Client's implementation: Client befriends this
// type, so the public header needs no accessor a user could call.
struct ClientAccess {
  static const std::shared_ptr<Client::Impl>& impl(const Client& c) noexcept { return c.impl_; }
};

}  // namespace zklock::detail
