// Real-ZooKeeper harness for zklock's integration tests and benchmarks.
//
// Everything here talks to actual processes: a standalone Debian ZooKeeper
// 3.8 server or a three-server ensemble on loopback, started with fork/exec
// of java, and child processes for failure tests.  Nothing is mocked.
//
// Rules every piece follows:
//  * Only 127.0.0.1.  Ports are picked below the kernel's ephemeral range so
//    an outgoing connection never takes a port a stopped server will need
//    again on restart.
//  * Every wait has a deadline; polls are short and bounded.  A wait that
//    fails throws HarnessError with what was seen (for servers: the tail of
//    the server's log).
//  * Every process started is killed: children get their own process group
//    (signals go to the group) and PR_SET_PDEATHSIG, so a crashed test binary
//    does not leave a JVM behind.  PDEATHSIG fires when the *thread* that
//    forked exits: start servers and children from a long-lived thread (the
//    test's main thread), not from a short-lived worker.
//
// Thread-safety: objects here are not thread-safe; use each one from one
// thread at a time.  four_letter_word(), parse_mntr() and free_loopback_port()
// may be called from any thread.
//
// Set ZKLOCK_TEST_KEEP_ZK=1 to keep server data dirs (config, data, zk.log)
// after the test for diagnosis.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include <zookeeper/zookeeper.h>

namespace zklock::test {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Every harness failure: a wait ran out, a process died, a spawn failed.
class HarnessError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// ---------------------------------------------------------------------------
// Ports and four-letter words

// A TCP port on 127.0.0.1 that nothing was bound to when checked.  Never the
// same port twice within one process.  Another process may still take it
// before the caller binds; ZkServer detects that and retries on a new port.
int free_loopback_port();

// Sends a four-letter word ("ruok", "srvr", "mntr", "conf", ...) and returns
// the whole answer, or nullopt if no connection or no complete answer came
// within `timeout`.  Never throws for network reasons.
std::optional<std::string> four_letter_word(const std::string& host, int port,
                                            std::string_view word,
                                            milliseconds timeout = milliseconds(2000));

// The `mntr` answer, one entry per line ("key<TAB>value").
//
// What Debian's 3.8.0 prints (checked on this package): ~500 keys, every value
// an integer except zk_version, zk_server_state and the zk_avg_* averages.
// Traffic counters, all cumulative since server start:
//   zk_packets_received, zk_packets_sent   packets from / to clients
//   zk_bytes_received_count                bytes received from clients
//   zk_response_bytes                      bytes of responses sent to clients
//   zk_watch_bytes                         bytes of watch notifications sent
//   zk_last/min/max_client_response_size   one response's size (-1 before any)
// There is no separate "bytes sent" key: client-bound bytes are
// zk_response_bytes + zk_watch_bytes.  Also useful: zk_num_alive_connections,
// zk_outstanding_requests, zk_znode_count, zk_ephemerals_count, zk_watch_count,
// zk_approximate_data_size, zk_server_state (standalone/leader/follower),
// zk_digest_mismatches_count, and latency summaries (zk_{avg,min,max,cnt,sum}_*,
// zk_p50/p95/p99/p999_*, e.g. zk_p99_updatelatency).
struct Mntr {
  std::map<std::string, std::string> values;  // key -> raw text

  // The value of `key` if present and an integer (counters, gauges).
  std::optional<std::int64_t> counter(std::string_view key) const;
  // The raw text of `key` if present (e.g. zk_server_state, zk_version).
  std::optional<std::string> text(std::string_view key) const;
};
Mntr parse_mntr(std::string_view text);

// ---------------------------------------------------------------------------
// Child processes for failure tests

// How a child ended, from waitpid's status.
struct ExitStatus {
  int raw = 0;
  bool exited() const;
  int exit_code() const;     // REQUIRES: exited()
  bool signaled() const;
  int term_signal() const;   // REQUIRES: signaled()
  std::string describe() const;  // "exit 0", "signal 9"
};

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH if it has no '/'
  // Added to (or replacing in) the parent's environment.
  std::vector<std::pair<std::string, std::string>> env;
  // If set, stdout and stderr are appended to this file.  Otherwise stdout is
  // a pipe read with read_line() if capture_stdout, or inherited.
  std::optional<std::filesystem::path> output_file;
  bool capture_stdout = true;
  // Working directory of the child; empty keeps the parent's.
  std::filesystem::path cwd;
  // Kill the child (SIGKILL) if the forking thread dies.  Off for processes
  // that must outlive the test binary (none of ours).
  bool die_with_parent = true;
};

// A spawned process in its own process group.  Move-only; the destructor
// SIGKILLs the group and reaps the child if it is still running.
class ChildProcess {
 public:
  // Throws HarnessError if fork or exec fails (an exec failure is reported by
  // the child through a close-on-exec pipe, so it is seen here, not later).
  static ChildProcess spawn(const SpawnOptions& options);

  ChildProcess() = default;
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  // True while the child has not been reaped (reaps it if it has exited).
  bool running();
  // Sends `sig` to the child's whole process group.  No-op once reaped.
  void signal(int sig);
  // Waits up to `timeout` for the child to exit; nullopt if it is still running.
  std::optional<ExitStatus> wait_exit(milliseconds timeout);
  // SIGTERM, then SIGKILL if it has not exited after `grace`; waits (bounded)
  // for the exit.  Returns how it ended.  Safe to call after it exited.
  ExitStatus terminate(milliseconds grace = milliseconds(5000));
  // The exit status once reaped.
  std::optional<ExitStatus> exit_status() const { return status_; }

  // Next line (without '\n') of the child's stdout, or nullopt if none arrived
  // within `timeout` or stdout ended.  REQUIRES: capture_stdout, no output_file.
  std::optional<std::string> read_line(milliseconds timeout);
  // Reads lines until one contains `needle` (returned) or the timeout passes.
  std::optional<std::string> read_until(std::string_view needle, milliseconds timeout);

 private:
  void reap_blocking_bounded(milliseconds timeout);
  void close_stdout();

  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  bool stdout_eof_ = false;
  std::string buffer_;
  std::optional<ExitStatus> status_;
};

// ---------------------------------------------------------------------------
// ZooKeeper servers

struct ZkServerOptions {
  milliseconds tick{200};  // tickTime; sessions expire in 2..20 ticks by default
  std::optional<milliseconds> min_session_timeout;
  std::optional<milliseconds> max_session_timeout;
  std::vector<std::string> extra_config;  // raw "key=value" lines for zoo.cfg
  // Jars appended to the server's classpath, e.g. for the Netty connection
  // factory (secureClientPort): Debian's zookeeper.jar manifest omits
  // netty-codec, netty-resolver and netty-transport-native-unix-common.
  std::vector<std::string> extra_classpath;
  int port = 0;                           // client port; 0 picks a free one
  milliseconds ready_timeout{30000};      // bound for start()/wait_ready()
  int java_heap_mb = 256;

  // Ensemble membership (ZkEnsemble fills these in).  my_id 0 = standalone.
  int my_id = 0;
  std::vector<std::string> server_lines;  // "server.N=127.0.0.1:quorum:election"
};

// One ZooKeeper server process: standalone, or one member of a ZkEnsemble.
//
// Layout of data_dir(): zoo.cfg, data/ (snapshots, logs, myid), zk.log (the
// server's own log via slf4j-simple), zk.out (JVM stdout/stderr), zk.pid.
//
// Invariants: port() and data_dir() never change after construction, so a
// restart serves the same connect string with the same persisted state
// (nodes, and sessions that have not expired yet).
class ZkServer {
 public:
  // Creates a fresh temp dir and config; does not start the server.
  explicit ZkServer(ZkServerOptions options = {});
  ~ZkServer();  // stops (TERM, then KILL) and removes the data dir
  ZkServer(const ZkServer&) = delete;
  ZkServer& operator=(const ZkServer&) = delete;

  // Starts the JVM and waits until it serves (start()), or only starts it
  // (launch(), for ensembles where a member serves once a quorum is up).
  // A standalone server whose auto-picked port turns out to be taken moves to
  // a new port, but only on its first start.
  void start();
  void launch();
  // Waits until this server serves clients: `ruok` answers `imok` and `conf`
  // shows our own data dir (standalone), or `srvr` shows Mode leader or
  // follower (member).  Throws HarnessError with the log tail on timeout or if
  // the process died.
  void wait_ready(Clock::time_point deadline);
  void wait_ready() { wait_ready(Clock::now() + options_.ready_timeout); }

  // SIGTERM, then SIGKILL after `grace`; waits for the exit (bounded).
  void stop(milliseconds grace = milliseconds(5000));
  // SIGKILL at once, like a machine losing power (the txn log is fsynced per
  // commit, so committed writes survive).
  void kill9();
  // SIGSTOP / SIGCONT: the server keeps its sockets but answers nothing, so
  // clients time out and sessions may expire.  resume() does not wait.
  void pause();
  void resume();

  bool running();
  bool paused() const { return paused_; }
  std::string connect_string() const;  // "127.0.0.1:PORT"
  int port() const { return port_; }
  pid_t pid() const { return process_.pid(); }
  const std::filesystem::path& data_dir() const { return dir_; }
  // The folder ZooKeeper calls dataDir (holds version-2/ and myid).
  std::filesystem::path zk_data_dir() const { return dir_ / "data"; }
  std::filesystem::path log_file() const { return dir_ / "zk.log"; }
  const ZkServerOptions& options() const { return options_; }

  // `mntr` of this server, parsed.  Throws HarnessError if it does not answer.
  Mntr mntr();
  // The last `lines` lines of zk.log (and zk.out), for failure messages.
  std::string log_tail(std::size_t lines = 40) const;

 private:
  void write_config();
  std::string diagnose(const std::string& what) const;

  ZkServerOptions options_;
  std::filesystem::path dir_;
  int port_ = 0;
  bool port_was_picked_ = false;
  bool started_once_ = false;
  bool paused_ = false;
  ChildProcess process_;
};

// Three servers on loopback forming one ensemble, each with its own client,
// quorum and election port and its own data dir (with myid).  initLimit and
// syncLimit are sized for the 200 ms tick (10 and 5 ticks).
class ZkEnsemble {
 public:
  static constexpr int kSize = 3;

  explicit ZkEnsemble(ZkServerOptions base = {});
  ~ZkEnsemble() = default;  // members stop and clean up themselves

  // Starts all members and waits until every one serves (a quorum formed).
  void start();
  // Waits until at least `count` members serve (Mode leader or follower),
  // among those running.  Throws HarnessError with the members' state on timeout.
  void wait_serving(int count, Clock::time_point deadline);
  void stop();

  // "127.0.0.1:p1,127.0.0.1:p2,127.0.0.1:p3"
  std::string connect_string() const;
  // Member i (0-based): stop/start/pause/resume/kill9 it individually.
  // member(i).start() waits until it serves, which needs a quorum.
  ZkServer& member(int i) { return *members_.at(static_cast<std::size_t>(i)); }
  // Index of the current leader per `srvr`, if one answers as leader.
  std::optional<int> leader_index();

 private:
  std::vector<std::unique_ptr<ZkServer>> members_;
};

// The one standalone server shared by all tests of this binary, started on
// first use and stopped at exit.  Tests isolate themselves with unique paths
// (see unique_path()).  Do not stop or pause it; start an own ZkServer for that.
ZkServer& shared_server();

// Milliseconds since `t`, for the figures tests print.
inline double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Polls `pred` from the calling thread every few milliseconds until it holds
// or `timeout` passes; returns whether it held. For conditions that have no
// event to wait on (a node count seen through a listing, a process's output).
template <class Pred>
bool eventually(Pred pred, milliseconds timeout = milliseconds(10000)) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return pred();
}

// "/<prefix>-<pid>-<counter>-<random>": a node path no other test or process
// uses.  Its parent is "/".
std::string unique_path(std::string_view prefix = "zklock-test");
// "/locks" + unique_path(prefix): a fresh lock path under the conventional root.
inline std::string unique_lock_path(std::string_view prefix) { return "/locks" + unique_path(prefix); }

// ---------------------------------------------------------------------------
// A bare C-client session for harness tests (the project's own Client class
// is what the lock tests use; this is for seeding and checking server state).

class ZkHandle {
 public:
  // Connects and waits (bounded) for ZOO_CONNECTED_STATE.  Throws HarnessError.
  static ZkHandle connect(const std::string& hosts,
                          milliseconds session_timeout = milliseconds(4000),
                          milliseconds timeout = milliseconds(10000));
  ZkHandle() = default;
  ZkHandle(ZkHandle&& other) noexcept;
  ZkHandle& operator=(ZkHandle&& other) noexcept;
  ZkHandle(const ZkHandle&) = delete;
  ZkHandle& operator=(const ZkHandle&) = delete;
  ~ZkHandle();  // zookeeper_close

  zhandle_t* get() const { return zh_; }
  std::int64_t session_id() const;
  int state() const;  // zoo_state()

  // Sync create; returns the ZooKeeper code and, on ZOK, the created path.
  int create(const std::string& path, std::string_view data, int flags,
             std::string* created = nullptr);
  // Throws HarnessError unless ZOK or ZNODEEXISTS.
  void ensure(const std::string& path);
  int exists(const std::string& path, Stat* stat = nullptr);
  int children(const std::string& path, std::vector<std::string>* out);

  struct Watch;  // implementation detail: session state shared with the C client's watcher

 private:
  void close();
  zhandle_t* zh_ = nullptr;
  std::unique_ptr<Watch> watch_;
};

// ---------------------------------------------------------------------------
// Sequence-counter surgery, for the sequence wrap tests.
//
// ZooKeeper names a sequential child after its parent's internal cversion
// (%010d), which counts child *creates* only (deletes do not advance it).
// Clients never see that counter directly: Stat.cversion is reported as
// 2*counter - numChildren (creates + deletes) in int32 arithmetic.  Debian's
// 3.8.0 saturates the counter at 2147483647: past it every sequential create
// under that parent gets suffix 2147483647 again (ZNODEEXISTS while that
// child exists, a reused name once it is deleted).  A counter set negative
// yields negative suffixes ("-2147483648", 11 characters).
//
// This sets that counter for `path` to `value` by editing the server's persisted state with
// tests/support/SetCversion.java (the path is created, as a persistent node,
// or a container if `container`, if missing).
//
// If the server is running it is stopped (SIGTERM), edited and started again
// on the same port; sessions survive if the restart is within their timeout.
// If it is stopped it is edited and stays stopped.  Throws HarnessError if the
// tool is not built (no javac at configure time) or fails.
// REQUIRES: a standalone server (not an ensemble member).
void set_child_sequence_counter(ZkServer& server, const std::string& path,
                                std::int32_t value, bool container = false);
// False if the SetCversion tool was not built (tests should GTEST_SKIP).
bool child_sequence_tool_available();

}  // namespace zklock::test
