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
//
// The parts: harness_base.hpp (clock, HarnessError, eventually), zk_net.hpp
// (ports, four-letter words, mntr), child_process.hpp (ChildProcess),
// zk_server.hpp (ZkServer, ZkEnsemble, shared_server); this header adds
// unique paths, a bare C-client session and the sequence-counter tool.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include <zookeeper/zookeeper.h>

#include "child_process.hpp"
#include "harness_base.hpp"
#include "zk_net.hpp"
#include "zk_server.hpp"

namespace zklock::test {

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
  int exists(const std::string& path, ::Stat* stat = nullptr);  // the C client's Stat
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
