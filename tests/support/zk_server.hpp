// ZooKeeper servers for tests and tools: a standalone server or a three-server
// ensemble on loopback, each a JVM started from a zoo.cfg this file writes.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "harness_base.hpp"
#include "zk_net.hpp"

namespace zklock::test {

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

namespace detail {
inline constexpr const char* kZkJar = "/usr/share/java/zookeeper.jar";
// $ZKLOCK_JAVA, else the java found at configure time, else "java" from PATH.
std::string java_binary();
}  // namespace detail

}  // namespace zklock::test
