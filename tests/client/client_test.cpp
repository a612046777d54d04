// zklock::Client against a real ZooKeeper: connecting, states, validity,
// leaks, bad input.
#include "zklock/client.hpp"

#include <dirent.h>
#include <unistd.h>
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <functional>
#include <future>
#include <memory>
#include <mutex>
#include <type_traits>
#include <thread>
#include <vector>

#include "fault_proxy.hpp"
#include "zk_harness.hpp"
#include "zklock/token.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test::ZkServer;
using test::ZkServerOptions;

int count_entries(const char* dir) {
  int n = 0;
  if (DIR* d = opendir(dir)) {
    while (readdir(d) != nullptr) ++n;
    closedir(d);
  }
  return n;
}

// Records connection states in order and lets a test wait for one.
struct StateLog {
  std::mutex mu;
  std::condition_variable cv;
  std::vector<ConnectionState> states;
  void attach(Client& c) {
    c.add_listener([this](ConnectionState s) {
      std::lock_guard lk(mu);
      states.push_back(s);
      cv.notify_all();
    });
  }
  bool wait_for(ConnectionState s, std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, timeout, [&] { return std::find(states.begin(), states.end(), s) != states.end(); });
  }
  void clear() {
    std::lock_guard lk(mu);
    states.clear();
  }
};

TEST(Client, ConnectsAndReportsSession) {
  Client c({.connect = test::shared_server().connect_string(), .session_timeout = 4s});
  EXPECT_TRUE(c.connected());
  EXPECT_NE(c.session_id(), 0);
  EXPECT_EQ(c.session_epoch(), 1u);
  EXPECT_GT(c.negotiated_timeout(), 0ms);
  EXPECT_GT(c.valid_until(), Clock::now());
  EXPECT_LE(c.valid_until(), Clock::now() + c.negotiated_timeout());
  const auto id = c.ensemble_id();
  EXPECT_TRUE(is_uuid(id)) << id;
  Client other({.connect = test::shared_server().connect_string()});
  EXPECT_EQ(other.ensemble_id(), id);  // read, not re-created
}

// A busy session keeps its validity bound ahead: every write's answer is
// evidence, and the bound needs one at least a heartbeat period older than
// the latest. Hundreds of writes per period must not crowd the old evidence
// out (they once did: the bound then lapsed under load, and a lease with it).
TEST(Client, ABusySessionKeepsItsValidityBoundAhead) {
  std::atomic<int> in_flight{0};  // outlives the client: closing it fails what is still in flight
  Client c({.connect = test::shared_server().connect_string(), .session_timeout = 4s});
  const auto path = "/busy-" + std::to_string(::getpid());
  c.create(path, "", CreateMode::ephemeral);
  int lapses = 0, checks = 0;
  const auto start = Clock::now();
  auto next_check = start + 1s;
  while (Clock::now() - start < 2 * c.negotiated_timeout()) {  // bounded: 8 s
    while (in_flight.load() < 20) {
      ++in_flight;
      c.set_data_async(path, "x", -1, [&](Status, const Stat&) { --in_flight; });
    }
    if (Clock::now() >= next_check) {
      ++checks;
      lapses += c.valid_until() <= Clock::now();
      next_check += 100ms;
    }
    std::this_thread::sleep_for(200us);
  }
  ASSERT_TRUE(test::eventually([&] { return in_flight.load() == 0; }, 10s));
  EXPECT_EQ(lapses, 0) << "of " << checks << " checks, the bound was in the past";
}

// Data at /zklock/ensemble-id that is not a UUID violate docs/protocol.md:
// the error says so (protocol_error, naming the node and the value), and the
// callback is released once it has run. A chroot gives the test its own /zklock.
TEST(Client, EnsembleIdThatIsNotAUuidIsAProtocolError) {
  const auto base = test::unique_path("bad-ensemble-id");
  {
    auto zk = test::ZkHandle::connect(test::shared_server().connect_string());
    zk.ensure(base);
    zk.ensure(base + "/zklock");
    ASSERT_EQ(zk.create(base + "/zklock/ensemble-id", "not-a-uuid", 0), ZOK);
  }
  Client c({.connect = test::shared_server().connect_string() + base});
  try {
    c.ensemble_id();
    FAIL() << "accepted a non-UUID ensemble id";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::protocol_error) << e.what();
    EXPECT_NE(std::string(e.what()).find("/zklock/ensemble-id"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("'not-a-uuid'"), std::string::npos) << e.what();
  }
  auto sentinel = std::make_shared<int>(0);
  const std::weak_ptr<int> held = sentinel;
  std::promise<Status> answered;
  c.ensemble_id_async([sentinel = std::move(sentinel), &answered](Status st, const std::string&) {
    answered.set_value(st);
  });
  auto f = answered.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  EXPECT_TRUE(f.get().is(Errc::protocol_error));
  EXPECT_TRUE(test::eventually([&] { return held.expired(); }, 5s)) << "the callback is never released";
}

// A callback that throws something not derived from std::exception is logged
// and dropped; the timer thread, which runs every deferred callback and
// timer of the client, keeps running.
TEST(Client, ForeignExceptionInADeferredCallbackDoesNotStopTheTimerThread) {
  Client c({.connect = test::shared_server().connect_string()});
  c.ensemble_id();  // now cached: ensemble_id_async answers from the timer thread
  std::promise<void> thrown;
  c.ensemble_id_async([&thrown](Status, const std::string&) {
    thrown.set_value();
    throw 42;
  });
  ASSERT_EQ(thrown.get_future().wait_for(10s), std::future_status::ready);
  std::promise<std::string> again;
  c.ensemble_id_async([&again](Status, const std::string& id) { again.set_value(id); });
  auto f = again.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready) << "the timer thread is gone";
  EXPECT_EQ(f.get(), c.ensemble_id());
}

// Mutexes keep a Client*: a Client must stay where it was constructed.
static_assert(!std::is_move_constructible_v<Client> && !std::is_move_assignable_v<Client>);
static_assert(!std::is_copy_constructible_v<Client> && !std::is_copy_assignable_v<Client>);

TEST(Client, SyncConveniencesAndErrors) {
  Client c({.connect = test::shared_server().connect_string()});
  const auto base = test::unique_path("client");
  c.ensure_path(base + "/a/b", CreateMode::persistent);
  EXPECT_TRUE(c.try_stat(base + "/a/b"));
  EXPECT_FALSE(c.try_get(base + "/missing"));
  EXPECT_EQ(c.children(base), std::vector<std::string>{"a"});
  try {
    c.children(base + "/missing");
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::no_node);
    EXPECT_NE(std::string(e.what()).find("missing"), std::string::npos);
  }
}

Errc code_of(auto&& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.code();
  }
  ADD_FAILURE() << "no Error thrown";
  return Errc::unknown_zk_error;
}

// Each operation's synchronous twin; the try_ forms answer nothing for a
// missing node and only for it; synchronous forms refuse inside a callback.
TEST(Client, SyncTwinsAndTryForms) {
  Client c({.connect = test::shared_server().connect_string()});
  const auto base = test::unique_path("twins");
  c.ensure_path(base, CreateMode::persistent);
  const auto node = c.create(base + "/n", "v1");
  EXPECT_EQ(node, base + "/n");
  EXPECT_NE(c.create(base + "/s-", "", CreateMode::persistent_sequential), base + "/s-");
  Stat st;
  EXPECT_EQ(c.get(node, &st), "v1");
  EXPECT_EQ(c.set_data(node, "v2", st.version).version, st.version + 1);
  EXPECT_EQ(c.try_get(node).value_or(""), "v2");
  EXPECT_EQ(code_of([&] { c.set_data(node, "v3", st.version); }), Errc::bad_version);
  EXPECT_EQ(c.stat(node).data_length, 2);

  const auto missing = base + "/missing";
  for (auto read : std::vector<std::function<void()>>{[&] { c.get(missing); }, [&] { c.children(missing); },
                                                      [&] { c.stat(missing); }, [&] { c.remove(missing); }}) {
    try {
      read();
      ADD_FAILURE() << "no Error for a missing node";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::no_node);
      EXPECT_EQ(e.zk_code(), -101);  // ZNONODE: the same pair a Status carries
    }
  }
  EXPECT_FALSE(c.try_get(missing));
  EXPECT_FALSE(c.try_children(missing));
  EXPECT_FALSE(c.try_stat(missing));
  EXPECT_EQ(code_of([&] { c.try_get("not-absolute"); }), Errc::bad_arguments) << "only no_node is nothing";

  const auto results = c.multi({Op::create(base + "/m", "x"), Op::check(node)});
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].created_path, base + "/m");
  try {
    c.multi({Op::check(node), Op::check(missing), Op::create(base + "/m2", "")});
    ADD_FAILURE() << "a failing multi did not throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::no_node);
    EXPECT_NE(std::string(e.what()).find("op 1 on " + missing), std::string::npos) << e.what();
  }
  EXPECT_FALSE(c.try_stat(base + "/m2")) << "all or nothing";
  c.remove(node);
  EXPECT_FALSE(c.try_stat(node));

  std::promise<Errc> refused;
  c.stat_async(base, nullptr, [&](Status, const Stat&) { refused.set_value(code_of([&] { c.get(base); })); });
  EXPECT_EQ(refused.get_future().get(), Errc::invalid_state);
}

TEST(Client, MalformedConnectStringIsRejectedUpFront) {
  for (const char* bad : {"", "localhost", "127.0.0.1:", "127.0.0.1:99999", "127.0.0.1:12a", ",127.0.0.1:2181",
                          "host name:2181", "127.0.0.1:2181/bad//chroot", "127.0.0.1:2181/zklock/../x",
                          "127.0.0.1:2181/zookeeper/./x", "127.0.0.1:2181/x/"}) {
    try {
      Client c({.connect = bad, .connect_timeout = 1s});
      ADD_FAILURE() << "accepted " << bad;
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::invalid_argument) << bad;
      EXPECT_NE(std::string(e.what()).find("connect string"), std::string::npos) << e.what();
    }
  }
}

TEST(Client, UnreachableServerFailsWithinTheConnectTimeout) {
  const int port = test::free_loopback_port();  // nothing listens there
  const auto start = Clock::now();
  try {
    Client c({.connect = "127.0.0.1:" + std::to_string(port), .connect_timeout = 1500ms});
    FAIL() << "connected to a closed port";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::connect_timeout);
    EXPECT_NE(std::string(e.what()).find("could not connect"), std::string::npos);
  }
  const auto took = Clock::now() - start;
  EXPECT_GE(took, 1400ms);
  EXPECT_LT(took, 4s);
}

TEST(Client, ConnectCloseCyclesLeakNoThreadsOrDescriptors) {
  const auto connect = test::shared_server().connect_string();
  { Client warmup({.connect = connect}); }
  const int fds_before = count_entries("/proc/self/fd");
  const int threads_before = count_entries("/proc/self/task");
  for (int i = 0; i < 500; ++i) {
    Client c({.connect = connect, .session_timeout = 4s});
    ASSERT_TRUE(c.connected());
  }
  const int fds_after = count_entries("/proc/self/fd");
  const int threads_after = count_entries("/proc/self/task");
  std::printf("500 connect/close cycles: fds %d -> %d, threads %d -> %d\n", fds_before, fds_after, threads_before,
              threads_after);
  EXPECT_EQ(fds_after, fds_before);
  EXPECT_EQ(threads_after, threads_before);
}

TEST(Client, DestroyWithPendingOperationsAndWatchesIsSafe) {
  const auto base = test::unique_path("pending");
  std::atomic<int> completions{0};
  {
    Client c({.connect = test::shared_server().connect_string()});
    c.ensure_path(base, CreateMode::persistent);
    for (int i = 0; i < 200; ++i) {
      c.stat_async(base + "/never", [](const WatchEvent&) {}, [&](Status, const Stat&) { ++completions; });
      c.children_async(base, [](const WatchEvent&) {}, [&](Status, std::vector<std::string>) { ++completions; });
    }
  }
  EXPECT_EQ(completions.load(), 400);  // every callback ran once, answered or ZCLOSING
}

// A dedicated server: these tests stop, restart and freeze it.
class ClientFailover : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = std::make_unique<ZkServer>(ZkServerOptions{.tick = std::chrono::milliseconds(200)});
    server_->start();
  }
  std::unique_ptr<ZkServer> server_;
};

TEST_F(ClientFailover, StopAndRestartWithinTimeoutReconnectsTheSameSession) {
  StateLog log;  // outlives the clients: their callback threads write into it
  Client c({.connect = server_->connect_string(), .session_timeout = 4s});
  log.attach(c);
  const auto sid = c.session_id();
  c.create_async("/eph", "", CreateMode::ephemeral, [](Status, const std::string&, const Stat&) {});
  ASSERT_TRUE(c.try_stat("/eph"));

  const auto stopped = Clock::now();
  server_->stop();
  ASSERT_TRUE(log.wait_for(ConnectionState::suspended, 2s));
  const auto detect = Clock::now() - stopped;
  std::printf("suspended %lld ms after the server stopped (tick 200 ms)\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(detect).count()));
  EXPECT_LT(detect, 400ms + 5s /* stop() itself waits for the JVM to exit */);
  server_->start();
  ASSERT_TRUE(log.wait_for(ConnectionState::reconnected, 10s));
  EXPECT_EQ(c.session_id(), sid);
  EXPECT_EQ(c.session_epoch(), 1u);
  EXPECT_TRUE(c.try_stat("/eph"));  // the ephemeral node survived with its session
}

// A restarted server reloads its sessions with fresh timers and a resumed
// frozen one may accept the reconnect before it expires anyone, so the
// client is kept away (a fault proxy refusing it) while the server runs on
// and expires the session; then the client is let back in.
TEST_F(ClientFailover, UnreachablePastTheTimeoutIsLostThenANewSession) {
  StateLog log;  // outlives the clients: their callback threads write into it
  test::FaultProxy proxy(server_->port());
  Client c({.connect = proxy.connect_string(), .session_timeout = 1s});
  Client direct({.connect = server_->connect_string()});
  log.attach(c);
  const auto sid = c.session_id();
  c.create_async("/eph2", "", CreateMode::ephemeral, [](Status, const std::string&, const Stat&) {});
  ASSERT_TRUE(c.try_stat("/eph2"));
  proxy.refuse(true);
  proxy.cut();
  ASSERT_TRUE(log.wait_for(ConnectionState::suspended, 5s));
  // The server expires the session (and its ephemeral node) on its own.
  test::eventually([&] { return !direct.try_stat("/eph2"); }, 10s);
  ASSERT_FALSE(direct.try_stat("/eph2")) << "the server did not expire the unreachable session";
  EXPECT_LE(c.valid_until(), Clock::now());  // the client's bound ran out first
  proxy.refuse(false);
  ASSERT_TRUE(log.wait_for(ConnectionState::lost, 15s));
  ASSERT_TRUE(log.wait_for(ConnectionState::connected, 15s));
  EXPECT_TRUE(c.wait_connected(5s));
  EXPECT_NE(c.session_id(), sid);
  EXPECT_EQ(c.session_epoch(), 2u);
  EXPECT_FALSE(c.try_stat("/eph2"));
}

TEST_F(ClientFailover, FrozenServerRunsOutTheValidityBoundBeforeTheSessionIsLost) {
  StateLog log;  // outlives the clients: their callback threads write into it
  Client c({.connect = server_->connect_string(), .session_timeout = 2s});
  log.attach(c);
  const auto timeout = c.negotiated_timeout();
  server_->pause();
  const auto frozen = Clock::now();
  // No answers: valid_until() stops advancing and passes within the timeout.
  while (Clock::now() < c.valid_until() && Clock::now() - frozen < 3 * timeout) {
    std::this_thread::sleep_for(10ms);
  }
  const auto passed = Clock::now() - frozen;
  std::printf("valid_until passed %lld ms after the freeze (timeout %lld ms)\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(passed).count()),
              static_cast<long long>(timeout.count()));
  EXPECT_LE(passed, timeout + 50ms);
  {
    std::lock_guard lk(log.mu);
    EXPECT_EQ(std::count(log.states.begin(), log.states.end(), ConnectionState::lost), 0);
  }
  server_->resume();
  EXPECT_TRUE(c.wait_connected(15s));
}

}  // namespace
}  // namespace zklock
