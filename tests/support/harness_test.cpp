// Tests of the real-ZooKeeper harness itself (tests/support/zk_harness.hpp):
// if these fail, every other integration test's results are suspect.
#include <gtest/gtest.h>

#include <algorithm>
#include <csignal>
#include <cstdlib>
#include <future>
#include <iostream>
#include <memory>

#include "zk_harness.hpp"

namespace zklock::test {
namespace {

using namespace std::chrono_literals;

// The C client logs every (re)connect attempt to stderr, which buries test
// output during restarts.  ZKLOCK_ZK_CLIENT_LOG=1 keeps it.
const bool quiet_client = [] {
  const char* keep = std::getenv("ZKLOCK_ZK_CLIENT_LOG");
  if (keep == nullptr || std::string_view(keep) != "1") zoo_set_debug_level(static_cast<ZooLogLevel>(0));
  return true;
}();

// Sequence suffix of a sequential node name: everything after `prefix`.
std::string suffix_of(const std::string& created, const std::string& prefix) {
  return created.substr(prefix.size());
}

// A create that cannot hang the test: async call, bounded wait.
int create_bounded(ZkHandle& zk, const std::string& path, milliseconds timeout) {
  auto done = std::make_shared<std::promise<int>>();
  auto result = done->get_future();
  auto* ctx = new std::shared_ptr<std::promise<int>>(done);
  int rc = zoo_acreate(
      zk.get(), path.c_str(), "", 0, &ZOO_OPEN_ACL_UNSAFE, ZOO_PERSISTENT,
      [](int code, const char*, const void* data) {
        auto* p = static_cast<std::shared_ptr<std::promise<int>>*>(const_cast<void*>(data));
        (*p)->set_value(code);
        delete p;
      },
      ctx);
  if (rc != ZOK) {
    delete ctx;
    return rc;
  }
  if (result.wait_for(timeout) != std::future_status::ready) return ZOPERATIONTIMEOUT;
  return result.get();
}

// Polls `zk` until it is connected again (after a server restart), bounded.
bool wait_connected(ZkHandle& zk, milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (zk.state() == ZOO_CONNECTED_STATE) return true;
    std::this_thread::sleep_for(20ms);
  }
  return zk.state() == ZOO_CONNECTED_STATE;
}

TEST(ZkHarness, SharedServerAnswersRuokAndServesClients) {
  ZkServer& server = shared_server();
  EXPECT_EQ(four_letter_word("127.0.0.1", server.port(), "ruok"), std::optional<std::string>("imok"));
  EXPECT_EQ(&server, &shared_server());

  ZkHandle zk = ZkHandle::connect(server.connect_string());
  std::string path = unique_path("harness");
  std::string created;
  ASSERT_EQ(zk.create(path, "x", ZOO_PERSISTENT, &created), ZOK);
  EXPECT_EQ(created, path);
  EXPECT_EQ(zk.exists(path), ZOK);
  EXPECT_NE(unique_path("harness"), path);
}

TEST(ZkHarness, RestartOnSamePortKeepsNodesAndSession) {
  ZkServer server;
  server.start();
  const int port = server.port();
  ZkHandle zk = ZkHandle::connect(server.connect_string(), 4000ms);
  const auto session = zk.session_id();
  ASSERT_EQ(zk.create("/kept", "data", ZOO_PERSISTENT), ZOK);
  ASSERT_EQ(zk.create("/mine", "", ZOO_EPHEMERAL), ZOK);

  server.stop();
  EXPECT_FALSE(server.running());
  EXPECT_FALSE(four_letter_word("127.0.0.1", port, "ruok", 300ms).has_value());
  server.start();
  EXPECT_EQ(server.port(), port);

  // The old session comes back (restart well within its 4 s timeout) and
  // still owns its ephemeral node.
  ASSERT_TRUE(wait_connected(zk, 10s));
  EXPECT_EQ(zk.session_id(), session);
  EXPECT_EQ(zk.exists("/kept"), ZOK);
  EXPECT_EQ(zk.exists("/mine"), ZOK);
}

TEST(ZkHarness, Kill9ThenRestartKeepsCommittedWrites) {
  ZkServer server;
  server.start();
  {
    ZkHandle zk = ZkHandle::connect(server.connect_string());
    ASSERT_EQ(zk.create("/survivor", "", ZOO_PERSISTENT), ZOK);
  }
  const pid_t old_pid = server.pid();
  server.kill9();
  EXPECT_FALSE(server.running());
  server.start();
  EXPECT_NE(server.pid(), old_pid);
  ZkHandle zk = ZkHandle::connect(server.connect_string());
  EXPECT_EQ(zk.exists("/survivor"), ZOK);
}

TEST(ZkHarness, PauseStopsAnswersAndResumeRestoresThem) {
  ZkServer server;
  server.start();
  server.pause();
  EXPECT_TRUE(server.paused());
  // The kernel still accepts the connection; nobody answers.
  EXPECT_FALSE(four_letter_word("127.0.0.1", server.port(), "ruok", 400ms).has_value());
  server.resume();
  server.wait_ready(Clock::now() + 10s);
  EXPECT_EQ(four_letter_word("127.0.0.1", server.port(), "ruok"), std::optional<std::string>("imok"));
}

TEST(ZkHarness, StopOfPausedServerIsBounded) {
  ZkServer server;
  server.start();
  server.pause();
  auto t0 = Clock::now();
  server.stop(2000ms);
  EXPECT_FALSE(server.running());
  EXPECT_LT(Clock::now() - t0, 15s);
}

TEST(ZkHarness, MntrParsesAndCountsTraffic) {
  Mntr sample = parse_mntr("zk_version\t3.8.0-x, built on y\nzk_packets_received\t42\nzk_avg_latency\t0.5\n\nbad line\n");
  EXPECT_EQ(sample.counter("zk_packets_received"), std::optional<std::int64_t>(42));
  EXPECT_FALSE(sample.counter("zk_avg_latency").has_value());  // not an integer
  EXPECT_EQ(sample.text("zk_avg_latency"), std::optional<std::string>("0.5"));
  EXPECT_EQ(sample.text("zk_version"), std::optional<std::string>("3.8.0-x, built on y"));
  EXPECT_EQ(sample.values.size(), 3u);

  ZkServer& server = shared_server();
  Mntr before = server.mntr();
  EXPECT_EQ(before.text("zk_server_state"), std::optional<std::string>("standalone"));
  {
    ZkHandle zk = ZkHandle::connect(server.connect_string());
    std::string path = unique_path("mntr");
    ASSERT_EQ(zk.create(path, std::string(1000, 'x'), ZOO_PERSISTENT), ZOK);
    for (int i = 0; i < 10; ++i) ASSERT_EQ(zk.exists(path), ZOK);
  }
  Mntr after = server.mntr();
  for (const char* key :
       {"zk_packets_received", "zk_packets_sent", "zk_bytes_received_count", "zk_response_bytes"}) {
    ASSERT_TRUE(before.counter(key).has_value()) << key;
    ASSERT_TRUE(after.counter(key).has_value()) << key;
  }
  EXPECT_GE(*after.counter("zk_packets_received") - *before.counter("zk_packets_received"), 11);
  EXPECT_GE(*after.counter("zk_packets_sent") - *before.counter("zk_packets_sent"), 11);
  EXPECT_GE(*after.counter("zk_bytes_received_count") - *before.counter("zk_bytes_received_count"), 1000);
  // Ten exists() replies carry a Stat each (16-byte header + 68-byte stat).
  EXPECT_GE(*after.counter("zk_response_bytes") - *before.counter("zk_response_bytes"), 10 * 84);
  std::cout << "[ mntr ] " << after.values.size() << " keys; traffic/bytes counters:";
  for (auto& [k, v] : after.values)
    if (k.find("packets") != std::string::npos || k.find("bytes") != std::string::npos ||
        k.find("response_size") != std::string::npos)
      std::cout << " " << k << "=" << v;
  std::cout << std::endl;
}

TEST(ZkHarness, EnsembleFormsQuorumSurvivesOneLossAndStopsWritesWithTwo) {
  ZkEnsemble ensemble;
  ensemble.start();
  ASSERT_TRUE(ensemble.leader_index().has_value());
  const std::string hosts = ensemble.connect_string();
  EXPECT_EQ(std::count(hosts.begin(), hosts.end(), ','), 2);

  ZkHandle zk = ZkHandle::connect(ensemble.connect_string(), 4000ms, 15s);
  ASSERT_EQ(create_bounded(zk, "/before", 10s), ZOK);

  // Losing the leader: the other two elect a new one and keep serving.
  const int leader = *ensemble.leader_index();
  ensemble.member(leader).stop();
  ensemble.wait_serving(2, Clock::now() + 30s);
  {
    ZkHandle again = ZkHandle::connect(ensemble.connect_string(), 4000ms, 15s);
    EXPECT_EQ(create_bounded(again, "/with-two", 10s), ZOK);
    EXPECT_EQ(again.exists("/before"), ZOK);
  }

  // Losing a second member: no quorum, so writes fail.
  const int second = (leader + 1) % ZkEnsemble::kSize;
  ensemble.member(second).stop();
  int rc = create_bounded(zk, "/with-one", 15s);
  EXPECT_NE(rc, ZOK) << "a write succeeded without a quorum";
  std::cout << "[ ensemble ] write with one of three members: " << zerror(rc) << std::endl;

  // And it recovers once a second member is back.
  ensemble.member(second).start();
  ensemble.wait_serving(2, Clock::now() + 30s);
  ZkHandle after = ZkHandle::connect(ensemble.connect_string(), 4000ms, 15s);
  EXPECT_EQ(create_bounded(after, "/recovered", 10s), ZOK);
}

TEST(ZkHarness, ChildProcessLinesSignalsAndExit) {
  SpawnOptions opts;
  opts.argv = {"sh", "-c", "echo hello; echo \"$ZKLOCK_TEST_VALUE\"; exec sleep 30"};
  opts.env = {{"ZKLOCK_TEST_VALUE", "from-env"}};
  ChildProcess child = ChildProcess::spawn(opts);
  EXPECT_EQ(child.read_line(5s), std::optional<std::string>("hello"));
  EXPECT_EQ(child.read_line(5s), std::optional<std::string>("from-env"));
  EXPECT_FALSE(child.read_line(100ms).has_value());  // nothing more yet
  EXPECT_TRUE(child.running());
  EXPECT_FALSE(child.wait_exit(100ms).has_value());
  child.signal(SIGTERM);
  auto st = child.wait_exit(5s);
  ASSERT_TRUE(st.has_value());
  EXPECT_TRUE(st->signaled());
  EXPECT_EQ(st->term_signal(), SIGTERM);

  SpawnOptions exiting;
  exiting.argv = {"sh", "-c", "echo a; echo b; exit 3"};
  ChildProcess quick = ChildProcess::spawn(exiting);
  EXPECT_EQ(quick.read_until("b", 5s), std::optional<std::string>("b"));
  auto qs = quick.wait_exit(5s);
  ASSERT_TRUE(qs.has_value());
  EXPECT_EQ(qs->describe(), "exit 3");

  SpawnOptions missing;
  missing.argv = {"/nonexistent/zklock-no-such-binary"};
  EXPECT_THROW(ChildProcess::spawn(missing), HarnessError);
}

// What a client sees as Stat.cversion: the server keeps a per-parent count
// of child creates (the sequence counter) and reports 2*creates - numChildren
// (= creates + deletes), in int32 arithmetic, so it wraps long before the
// counter does.
std::int32_t visible_cversion(std::int32_t counter, std::int32_t num_children) {
  auto v = static_cast<std::uint32_t>(counter) * 2u - static_cast<std::uint32_t>(num_children);
  return static_cast<std::int32_t>(v);
}

TEST(ZkHarness, SequenceCounterToolSetsSuffixesAndShowsWhatHappensPastIntMax) {
  if (!child_sequence_tool_available()) GTEST_SKIP() << "SetCversion tool not built (no javac)";
  ZkServer server;
  server.start();
  ZkHandle zk = ZkHandle::connect(server.connect_string(), 4000ms);
  ASSERT_EQ(zk.create("/wrap", "", ZOO_PERSISTENT), ZOK);
  ASSERT_EQ(zk.create("/wrap/held", "", ZOO_EPHEMERAL), ZOK);
  const auto session = zk.session_id();

  // Deletes do not advance the counter: only creates do.
  std::string first, second;
  ASSERT_EQ(zk.create("/wrap/d-", "", ZOO_EPHEMERAL_SEQUENTIAL, &first), ZOK);
  ASSERT_EQ(zoo_delete(zk.get(), first.c_str(), -1), ZOK);
  ASSERT_EQ(zk.create("/wrap/d-", "", ZOO_EPHEMERAL_SEQUENTIAL, &second), ZOK);
  EXPECT_EQ(std::stoll(suffix_of(second, "/wrap/d-")), std::stoll(suffix_of(first, "/wrap/d-")) + 1);
  ASSERT_EQ(zoo_delete(zk.get(), second.c_str(), -1), ZOK);

  // The server is running: the helper stops it, edits, and restarts it.
  set_child_sequence_counter(server, "/wrap", 2147483640);
  ASSERT_TRUE(server.running());
  ASSERT_TRUE(wait_connected(zk, 10s));
  EXPECT_EQ(zk.session_id(), session);
  EXPECT_EQ(zk.exists("/wrap/held"), ZOK) << "ephemeral lost across the edit";
  Stat stat;
  ASSERT_EQ(zk.exists("/wrap", &stat), ZOK);
  EXPECT_EQ(stat.cversion, visible_cversion(2147483640, stat.numChildren));

  std::vector<std::string> suffixes;
  for (int i = 0; i < 10; ++i) {
    std::string created;
    int rc = zk.create("/wrap/n-", "", ZOO_EPHEMERAL_SEQUENTIAL, &created);
    suffixes.push_back(rc == ZOK ? suffix_of(created, "/wrap/n-") : std::string("<") + zerror(rc) + ">");
  }
  for (int i = 0; i < 8; ++i)
    EXPECT_EQ(suffixes[static_cast<std::size_t>(i)], std::to_string(2147483640 + i));
  ASSERT_EQ(zk.exists("/wrap", &stat), ZOK);
  std::cout << "[ sequence ] from counter 2147483640, suffixes:";
  for (auto& s : suffixes) std::cout << " " << s;
  std::cout << "  (Stat.cversion after: " << stat.cversion << ", numChildren " << stat.numChildren << ")"
            << std::endl;
  // Debian's 3.8.0 saturates: the counter stays at INT_MAX, so the next
  // create collides with n-2147483647 ...
  EXPECT_EQ(suffixes[8], std::string("<") + zerror(ZNODEEXISTS) + ">");
  EXPECT_EQ(stat.cversion, visible_cversion(2147483647, stat.numChildren));
  // ... and once that node is gone, the same suffix is handed out again.
  ASSERT_EQ(zoo_delete(zk.get(), "/wrap/n-2147483647", -1), ZOK);
  std::string again;
  ASSERT_EQ(zk.create("/wrap/n-", "", ZOO_EPHEMERAL_SEQUENTIAL, &again), ZOK);
  std::cout << "[ sequence ] after deleting n-2147483647, the next create got " << again << std::endl;
  EXPECT_EQ(again, "/wrap/n-2147483647");

  // The wrapped regime: start at INT_MIN on a fresh container parent; the
  // server is stopped here, so the helper leaves it stopped.
  server.stop();
  set_child_sequence_counter(server, "/wrapped/lock", -2147483647 - 1, /*container=*/true);
  EXPECT_FALSE(server.running());
  server.start();
  ZkHandle zk2 = ZkHandle::connect(server.connect_string());
  ASSERT_EQ(zk2.exists("/wrapped/lock", &stat), ZOK);
  EXPECT_EQ(stat.cversion, visible_cversion(-2147483647 - 1, 0));
  std::vector<std::string> wrapped;
  for (int i = 0; i < 3; ++i) {
    std::string created;
    ASSERT_EQ(zk2.create("/wrapped/lock/n-", "", ZOO_EPHEMERAL_SEQUENTIAL, &created), ZOK);
    wrapped.push_back(suffix_of(created, "/wrapped/lock/n-"));
  }
  EXPECT_EQ(wrapped[0], "-2147483648");  // %010d of a negative: 11 characters
  EXPECT_EQ(wrapped[1], "-2147483647");
  std::cout << "[ sequence ] from counter -2147483648, suffixes:";
  for (auto& s : wrapped) std::cout << " " << s;
  std::cout << std::endl;

  // The edit is invisible to the server's integrity checks.
  EXPECT_EQ(server.mntr().counter("zk_digest_mismatches_count"), std::optional<std::int64_t>(0));
}

}  // namespace
}  // namespace zklock::test
