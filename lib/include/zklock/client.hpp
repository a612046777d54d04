// zklock::Client — one ZooKeeper session, kept alive and accounted for.
//
// A Client owns the C client's zhandle_t and everything hanging off it.
// (Lock attempts whose watches would not fit one session's re-arm request
// go to more sessions behind the same Client: ClientOptions::watch_budget_bytes.) It
// reports connection states to listeners, re-establishes a new session by
// itself after expiry (every lease of the old one is lost), and maintains a
// validity bound that does not trust the network:
//
//   valid_until() = t1 + negotiated session timeout − safety margin
//
// where t1 is the send time of a write of ours that a quorum committed,
// answered on a connection that then carried two more committed writes: one
// sent at least 0.75 × tickTime after t1's answer, one sent after that one's
// answer. Reads and syncs never count: a follower cut off from the leader
// keeps answering reads, and a deposed leader answers syncs, while the new
// leader expires the session. No leader can have expired the session before
// valid_until() (the proof and its assumptions are in docs/design.md, "Loss
// and the validity bound"). When the session writes nothing else, a
// heartbeat write (a setData answered ZNONODE, committed as an error
// transaction) goes out once per heartbeat period. A process frozen past its bound
// sees valid_until() in the past the instant it resumes (steady clock), and
// the bound's lapse is reported to its leases before any answer can raise it
// again: once passed, a lease is lost even if the session survives.
//
// Thread-safety: all methods may be called from any thread. Callbacks given
// to the async operations run on the C client's completion thread: they must
// be cheap and must not block (hand work on; never call a synchronous method
// from them — it throws Errc::invalid_state instead of deadlocking).
// Listener callbacks run on the client's own callback thread, in order.
// Destroying a Client with operations or watches pending is safe: their
// callbacks run once with Errc::closing. Do not destroy a Client from one of
// its own callbacks.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zklock/error.hpp"
#include "zklock/observer.hpp"

namespace zklock {

enum class ConnectionState {
  connected,    // a new session is established
  suspended,    // disconnected; the session may still live on the server
  reconnected,  // the same session is back
  lost,         // the session expired (or authentication failed): every lease of it is lost
};
std::string_view state_name(ConnectionState s) noexcept;

// How much of the ZooKeeper C client's own log reaches zklock's logger.
enum class LogLevel { debug, info, warn, error };

struct DigestCredentials {
  std::string user;
  std::string password;
};

// ZooKeeper permission bits.
namespace perm {
inline constexpr int read = 1, write = 2, create = 4, remove = 8, admin = 16, all = 31;
}

struct AclEntry {
  std::string scheme;  // "world", "digest", "auth", "ip"
  std::string id;      // "anyone", "user:base64(sha1(user:password))", ...
  int perms = perm::all;
};

struct ClientOptions {
  // "host:port[,host:port...][/chroot]". Validated up front.
  std::string connect = "127.0.0.1:2181";
  // Requested session timeout; the server may negotiate it into its bounds.
  std::chrono::milliseconds session_timeout = std::chrono::seconds(10);
  // How long the constructor waits for the first session before failing.
  std::chrono::milliseconds connect_timeout = std::chrono::seconds(5);
  std::optional<DigestCredentials> credentials;
  // ACL put on nodes zklock creates. Empty: world:anyone:all without
  // credentials; with credentials, "auth" (the creator) all + world read.
  std::vector<AclEntry> acl;
  // Prefix of default owner ids; default "<hostname>/<pid>".
  std::string owner_prefix;
  // Subtracted from the validity bound for clock-rate error between client
  // and server. Zero picks max(negotiated timeout / 10, 20 ms).
  std::chrono::milliseconds validity_margin{0};
  // The ensemble's tickTime, which the validity bound's proof needs. Zero:
  // read it at start with the `conf` four-letter word (the servers'
  // 4lw.commands.whitelist must include conf); when no server answers it, the
  // bound assumes tickTime <= half the negotiated timeout (true unless
  // minSessionTimeout is configured below 2 × tickTime) and logs a warning.
  std::chrono::milliseconds server_tick_time{0};
  // The C client re-resolves host names on every I/O loop by default, which
  // costs client CPU on every request; re-resolve at most this often.
  std::chrono::milliseconds resolution_delay = std::chrono::seconds(30);
  // The waiting watchdog: a waiter that has heard nothing of the node it
  // waits behind for this long checks again (one listing per lock, and for a
  // node still at the head, a probe the leader answers), so that no grant
  // rests on one notification arriving. Doubles while the same node stays
  // ahead, up to 8 times. Zero: the negotiated session timeout; at least
  // 500 ms either way. docs/design.md, "The waiting watchdog".
  std::chrono::milliseconds wait_check{0};
  // The most a session's watches may take in the request that re-arms them
  // on every reconnect (SetWatches: each watched path as 4 bytes plus its
  // length, with the chroot). A server closes a connection whose request is
  // longer than its jute.maxbuffer (1 MB by default), and a session that
  // cannot re-arm its watches never reconnects. Keep it at most half the
  // servers' jute.maxbuffer. Lock attempts that would pass it go to another
  // session behind this Client, opened when needed (Client::sessions); the
  // watches of the operations below (get_async, children_async, stat_async)
  // are the caller's to budget. Positive; a budget smaller than one
  // attempt's watches gives each attempt a session. docs/operations.md,
  // "Watches and jute.maxbuffer".
  std::size_t watch_budget_bytes = 512 * 1024;
  // The least severe of the C client's own log lines passed on to `logger`.
  LogLevel zk_log_level = LogLevel::warn;
  // spdlog logger name used by zklock ("zklock").
  std::string logger = "zklock";
  // Told of every acquisition, grant, failure, release and loss of this
  // client's locks, and of validity-bound lapses (observer.hpp: threads and
  // what it must not do). Null: none, at the cost of one branch per event.
  std::shared_ptr<LockObserver> observer;
};

struct Stat {
  std::int64_t czxid = 0, mzxid = 0, ctime = 0, mtime = 0, pzxid = 0;
  std::int32_t version = 0, cversion = 0, aversion = 0;
  std::int64_t ephemeral_owner = 0;
  std::int32_t data_length = 0, num_children = 0;
};

enum class CreateMode { persistent, ephemeral, persistent_sequential, ephemeral_sequential, container };

struct WatchEvent {
  enum class Type { created, deleted, changed, child } type;
  std::string path;
};
// A one-shot watch, delivered once to exactly the caller that set it. Session
// events are not delivered to it (use listeners). An empty Watcher sets no watch.
using Watcher = std::function<void(const WatchEvent&)>;

// One operation of a multi().
struct Op {
  enum class Kind { create, remove, set_data, check } kind = Kind::check;
  std::string path;
  std::string data;
  CreateMode mode = CreateMode::persistent;
  int version = -1;  // -1: any version (for check: the node must exist)

  static Op create(std::string path, std::string data, CreateMode mode = CreateMode::persistent);
  static Op remove(std::string path, int version = -1);
  static Op set_data(std::string path, std::string data, int version = -1);
  static Op check(std::string path, int version = -1);
};
struct OpResult {
  Status status;
  std::string created_path;  // for Kind::create
};

namespace detail {
struct ClientAccess;  // lib/src: how zklock's recipes reach the implementation
}

// The operations, each as `x_async` and a synchronous twin `x` (ensure_path
// and the try_ forms below exist only synchronously):
//
//   create / create_async        make a node (returns the path it got)
//   get / get_async              a node's data and Stat
//   children / children_async    a node's child names (unordered)
//   stat / stat_async            a node's Stat (ZooKeeper's exists())
//   set_data / set_data_async    replace a node's data
//   remove / remove_async        delete a node
//   multi / multi_async          several of the above as one transaction
//   ensemble_id / ensemble_id_async
//
// Asynchronous forms never throw for a ZooKeeper failure: `done` runs exactly
// once with a Status (error.hpp) — on the C client's completion thread, or on
// the client's timer thread for a request that could not be sent (never
// inline in the caller). A Watcher, where taken, is one-shot (see Watcher).
//
// Synchronous forms wait for the answer and throw Error on any failure (its
// code() as the Status would carry it), including Errc::no_node for a missing
// node. They throw Errc::invalid_state when called from inside a zklock
// callback instead of deadlocking. Where a missing node is an expected
// answer, a `try_` form (try_get, try_stat, try_children) returns
// std::nullopt for Errc::no_node and only for it; every other failure throws.
class Client {
 public:
  // Connects and waits for the first session. Throws Error:
  // invalid_argument for a malformed connect string, connect_timeout when no
  // server answers within options.connect_timeout, auth_failed.
  explicit Client(ClientOptions options);
  ~Client();
  // Neither copyable nor movable: the mutexes and lock attempts keep a
  // Client*, which a move would leave pointing at an empty shell. Hold it in
  // a std::unique_ptr or std::optional to choose its lifetime.
  Client(Client&&) = delete;
  Client& operator=(Client&&) = delete;
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  const ClientOptions& options() const noexcept;

  ConnectionState state() const;
  bool connected() const;
  std::int64_t session_id() const;
  // Counts sessions: 1 for the first, +1 each time a new one replaces an expired one.
  std::uint64_t session_epoch() const;
  // How many times a waiter of this client found its server listing a lock
  // node that the leader says is gone (ClientOptions::wait_check): the
  // server has diverged from the quorum. Logged at warning each time.
  std::uint64_t diverged_servers_seen() const;
  // How many ZooKeeper sessions this Client runs: its own, and one more for
  // each ClientOptions::watch_budget_bytes of lock attempts' watches under
  // way. state(), session_id(), listeners and the operations below concern
  // its own session; a lease's valid() and loss concern the session its node
  // is on.
  std::size_t sessions() const;
  // The watch bytes seated on each session, its own first (see
  // ClientOptions::watch_budget_bytes: an upper bound of what a reconnect re-arms).
  std::vector<std::size_t> seated_watch_bytes() const;
  // How many of this client's sessions fell into a reconnect loop: three or
  // more consecutive connections, over at least the negotiated session
  // timeout, each closed before any request was answered on it and within a
  // third of the timeout of its handshake (a server refusing the session's
  // SetWatches packet does this). Such a session never expires by itself;
  // the client logs the loop at error, ends the session as if it had
  // expired (every lease of it is lost) and starts a new one.
  // docs/operations.md, "A reconnect loop".
  std::uint64_t reconnect_loops_seen() const;
  std::chrono::milliseconds negotiated_timeout() const;
  // See the file comment. In the past while no session is known to be alive.
  std::chrono::steady_clock::time_point valid_until() const;
  // Blocks until connected (or the deadline). Returns whether connected.
  bool wait_connected(std::chrono::milliseconds timeout) const;

  // Listeners hear about state changes after they were added (not the
  // session the constructor established), on the callback thread, in order.
  using ListenerId = std::uint64_t;
  ListenerId add_listener(std::function<void(ConnectionState)> listener);
  void remove_listener(ListenerId id);

  // "<owner_prefix>/<thread id>" for the calling thread.
  std::string default_owner() const;
  const std::string& owner_prefix() const noexcept;

  // Runs fn on the client's callback thread (user-facing notifications).
  void post(std::function<void()> fn);

  // --- asynchronous operations (see above) ---
  // `data` may be empty. Sequential modes append a counter to the name:
  // created_path is the path the node got. ACL: ClientOptions::acl.
  void create_async(std::string path, std::string data, CreateMode mode,
                    std::function<void(Status, const std::string& created_path, const Stat&)> done);
  void get_async(std::string path, Watcher watch,
                 std::function<void(Status, std::string data, const Stat&)> done);
  // The watch, if any, fires on a child created or deleted (WatchEvent::child)
  // or on the node's own deletion; it is set only when the node exists.
  void children_async(std::string path, Watcher watch,
                      std::function<void(Status, std::vector<std::string>)> done);
  // ZooKeeper's exists(): a missing node answers Errc::no_node, and the watch,
  // if any, is set either way (it fires when the node is created, too).
  void stat_async(std::string path, Watcher watch, std::function<void(Status, const Stat&)> done);
  // version -1: any version; otherwise a mismatch answers Errc::bad_version.
  void set_data_async(std::string path, std::string data, int version,
                      std::function<void(Status, const Stat&)> done);
  void remove_async(std::string path, int version, std::function<void(Status)> done);
  // All or nothing. On failure the Status is the first failing op's, and each
  // OpResult says which op failed (the others carry ok or
  // runtime_inconsistency, as ZooKeeper reports them).
  void multi_async(std::vector<Op> ops, std::function<void(Status, std::vector<OpResult>)> done);
  // The ensemble's identity (docs/protocol.md): /zklock/ensemble-id, created
  // if absent, read once per session. Data that is not a UUID fails with
  // Errc::protocol_error. Always answers from another thread, so `done` may
  // take locks the caller holds.
  void ensemble_id_async(std::function<void(Status, const std::string&)> done);

  // --- synchronous operations (see above; throw Error) ---
  std::string create(const std::string& path, std::string data = {}, CreateMode mode = CreateMode::persistent);
  // Creates `path` and any missing ancestors (ancestors as `parent_mode`,
  // which must be persistent or container). Existing nodes are fine.
  void ensure_path(const std::string& path, CreateMode parent_mode = CreateMode::container);
  std::string get(const std::string& path, Stat* stat = nullptr);
  std::optional<std::string> try_get(const std::string& path, Stat* stat = nullptr);
  std::vector<std::string> children(const std::string& path);
  std::optional<std::vector<std::string>> try_children(const std::string& path);
  Stat stat(const std::string& path);
  std::optional<Stat> try_stat(const std::string& path);
  Stat set_data(const std::string& path, std::string data, int version = -1);
  void remove(const std::string& path, int version = -1);
  // The per-op results on success; on failure throws the failing op's error,
  // its message naming the op's index and path.
  std::vector<OpResult> multi(std::vector<Op> ops);
  std::string ensemble_id();

  // The implementation, opaque here: zklock's recipes reach it through
  // detail::ClientAccess (lib/src/client_impl.hpp), not through this API.
  struct Impl;

 private:
  friend struct detail::ClientAccess;
  std::shared_ptr<Impl> impl_;
};

// Validates a connect string; throws Error(invalid_argument) explaining why.
void validate_connect_string(std::string_view connect);

// "user:base64(sha1(user:password))" — the id of a digest ACL entry.
std::string digest_acl_id(std::string_view user, std::string_view password);

}  // namespace zklock
