// ZooKeeper servers for tests and tools: a standalone server or a three-server
// ensemble on loopback, each a JVM started from a zoo.cfg this file writes.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "child_process.hpp"
#include "harness_base.hpp"
#include "zk_net.hpp"

namespace zklock::test {

namespace detail {
inline constexpr const char* kZkJar = "/usr/share/java/zookeeper.jar";
// $ZKLOCK_JAVA, else the java found at configure time, else "java" from PATH.
std::string java_binary();
}  // namespace detail

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
  // The JVM's own defaults for the JIT and the collector, as zkServer.sh
  // runs ZooKeeper, instead of the quick-start settings (C1 only, serial GC)
  // that suit short tests. For benchmarks: a C1-only server spends several
  // times the CPU per request, and on a small machine that CPU is taken from
  // the clients being measured.
  bool jvm_defaults = false;
  std::string java = detail::java_binary();
  std::string zk_jar = detail::kZkJar;

  // Where the server lives.  Empty: a fresh temp dir, removed by the
  // destructor (kept with ZKLOCK_TEST_KEEP_ZK=1).  Set: that dir, created if
  // missing and never removed by ZkServer.
  std::filesystem::path dir;
  // For servers that outlive this process (zklock-zk-server): the JVM runs in
  // its own session without PDEATHSIG, and the destructor leaves it running.
  bool detached = false;

  // Ensemble membership (ZkEnsemble fills these in).  my_id 0 = standalone.
  int my_id = 0;
  std::vector<std::string> server_lines;  // "server.N=127.0.0.1:quorum:election"
};

// One ZooKeeper server process: standalone, or one member of a ZkEnsemble.
//
// Layout of data_dir(): zoo.cfg, data/ (snapshots, logs, myid), zk.log (the
// server's own log via slf4j-simple), zk.out (JVM stdout/stderr), zk.pid.
//
// zk.pid holds the JVM's pid; a detached server is found again by its dir
// (open()), so a later process can stop it or start it again.
//
// Invariants: port() and data_dir() never change after construction, so a
// restart serves the same connect string with the same persisted state
// (nodes, and sessions that have not expired yet).
class ZkServer {
 public:
  // Creates the dir (options.dir, or a fresh temp dir) and writes its config;
  // does not start the server.
  explicit ZkServer(ZkServerOptions options = {});
  // The server whose dir is `dir`, written by an earlier ZkServer: port and
  // membership come from its zoo.cfg (not rewritten, except clientPort when
  // how.port != 0), and its JVM is adopted if one is running.  How to run it
  // (java, jar, heap, ready_timeout) comes from `how`.  The result is
  // detached.  Throws HarnessError if dir has no zoo.cfg.
  static std::unique_ptr<ZkServer> open(const std::filesystem::path& dir, ZkServerOptions how = {});
  // The pid in dir/zk.pid if that process is alive and is the ZooKeeper
  // started from dir/zoo.cfg (so a reused pid is not taken for it).
  static std::optional<pid_t> running_pid(const std::filesystem::path& dir);
  // Unless detached: stops (TERM, then KILL) and removes a temp dir.
  ~ZkServer();
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
  struct Adopt {};
  ZkServer(Adopt, const std::filesystem::path& dir, ZkServerOptions how);
  void write_config();
  std::string diagnose(const std::string& what) const;

  ZkServerOptions options_;
  std::filesystem::path dir_;
  int port_ = 0;
  bool port_was_picked_ = false;
  bool started_once_ = false;
  bool paused_ = false;
  bool owns_dir_ = false;  // a temp dir made by the constructor: removed at the end
  ChildProcess process_;
};

// Three servers on loopback forming one ensemble, each with its own client,
// quorum and election port and its own data dir (with myid).  initLimit and
// syncLimit are sized for the 200 ms tick (10 and 5 ticks).
//
// With base.dir set, member i (1-based) lives in base.dir/i and
// base.dir/connect holds the connect string, so open() finds it again.
class ZkEnsemble {
 public:
  static constexpr int kSize = 3;

  explicit ZkEnsemble(ZkServerOptions base = {});
  // The ensemble in `dir`, each member opened with ZkServer::open(dir/i, how).
  static ZkEnsemble open(const std::filesystem::path& dir, const ZkServerOptions& how = {});
  ~ZkEnsemble() = default;  // members stop and clean up themselves

  // Starts the members that are not running and waits until every one
  // serves (a quorum formed).
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
  explicit ZkEnsemble(std::vector<std::unique_ptr<ZkServer>> members) : members_(std::move(members)) {}
  std::vector<std::unique_ptr<ZkServer>> members_;
};

// The one standalone server shared by all tests of this binary, started on
// first use and stopped at exit.  Tests isolate themselves with unique paths
// (see unique_path()).  Do not stop or pause it; start an own ZkServer for that.
ZkServer& shared_server();

}  // namespace zklock::test
