// zklock-detector past one session's re-arm limit: on reconnect
// the 3.8 C client re-arms every watch of a session in one SetWatches
// packet, and the server drops a connection whose packet exceeds
// jute.maxbuffer (1 MB by default). 40,000 watched lock dirs (~1.8 MB of
// paths) on one session wedged the detector after a server restart: every
// reconnect re-sent the oversize packet and was dropped, and no cycle formed
// afterwards was broken. The mirror now spreads its watches over sessions
// of at most ClientOptions::watch_budget_bytes each.
//
// ZKLOCK_WATCH_BUDGET_DIRS changes the number of lock dirs (default 40,000).
// The fixtures: e2e_fixtures.hpp.
#include <gtest/gtest.h>

#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "detector/mirror.hpp"
#include "e2e_fixtures.hpp"
#include "fault_proxy.hpp"
#include "zk_harness.hpp"
#include "zklock/protocol/node_data.hpp"
#include "zklock/protocol/node_name.hpp"

namespace zklock::detector {
namespace {

using namespace e2e;
using namespace std::chrono_literals;

std::size_t dirs_wanted() {
  const char* env = std::getenv("ZKLOCK_WATCH_BUDGET_DIRS");
  return env ? std::stoul(env) : 40'000;
}

// Creates `n` lock dirs under `root`, each holding one zklock-shaped node
// (an ephemeral sequential child of `owner`'s session named and filled as
// the lock recipe does): one multi per 100 dirs, at most 16 multis in
// flight. Returns once every multi answered; throws on any failure.
void plant_lone_locks(Client& owner, const std::string& root, std::size_t n) {
  struct Flight {
    std::mutex mu;
    std::condition_variable cv;
    std::size_t inflight = 0;
    std::string error;
  } f;
  constexpr std::size_t kPerMulti = 100, kMaxInflight = 16;
  protocol::NodeData d{"planter", "testhost", 1, Mode::exclusive, 0, ""};
  const auto data = protocol::encode_node_data(d);
  const auto prefix = protocol::lock_node_prefix(Mode::exclusive, protocol::owner_key("planter"), protocol::new_guid());
  for (std::size_t first = 0; first < n; first += kPerMulti) {
    std::vector<Op> ops;
    for (std::size_t i = first; i < std::min(n, first + kPerMulti); ++i) {
      const auto dir = root + "/l" + std::to_string(i);
      ops.push_back(Op::create(dir, ""));
      ops.push_back(Op::create(dir + "/" + prefix, data, CreateMode::ephemeral_sequential));
    }
    std::unique_lock lk(f.mu);
    require(f.cv.wait_for(lk, 60s, [&] { return f.inflight < kMaxInflight; }), "planting: no answer in 60 s");
    require(f.error.empty(), f.error);
    ++f.inflight;
    lk.unlock();
    owner.multi_async(std::move(ops), [&f](Status s, std::vector<OpResult>) {
      std::lock_guard lk(f.mu);
      if (!s.ok() && f.error.empty()) f.error = std::string("planting: ") + std::string(errc_name(s.code()));
      --f.inflight;
      f.cv.notify_all();
    });
  }
  std::unique_lock lk(f.mu);
  require(f.cv.wait_for(lk, 60s, [&] { return f.inflight == 0; }), "planting: no answer in 60 s");
  require(f.error.empty(), f.error);
}

// The operator's report, on a real server with the default jute.maxbuffer:
// mirror 40,000 lock dirs, restart the server well inside the detector's
// session timeout, then close a real cross-order cycle: it must be broken.
TEST(DetectorE2E, MirrorOfFortyThousandLockDirsBreaksACycleAfterAZooKeeperRestart) {
  const auto n = dirs_wanted();
  test::ZkServerOptions so;
  so.max_session_timeout = 60s;  // the detector asks for 20 s
  test::ZkServer server(so);
  server.start();
  const auto zk = server.connect_string();
  const auto root = test::unique_path("e2e-budget");

  auto planter_options = session(zk);
  planter_options.session_timeout = 30s;  // its nodes must outlive the restart
  Client planter(planter_options);
  planter.ensure_path(root, CreateMode::persistent);
  auto t = Clock::now();
  plant_lone_locks(planter, root, n);
  std::printf("[ budget   ] planted %zu lock dirs, one held node each, in %.3f s\n", n, secs(Clock::now() - t));

  auto cfg = config(zk, root, "e2e-budget");
  cfg.session_timeout = 20s;
  cfg.resync_interval = 10min;  // watches, not the safety net, must carry the mirror
  t = Clock::now();
  Running run(cfg);
  ASSERT_TRUE(run.daemon().election().wait_leader(10s));
  ASSERT_TRUE(eventually(
      [&] {
        const auto s = run.daemon().mirror().stats();
        return s.nodes == n && s.pending == 0;
      },
      60s))
      << "mirrored " << run.daemon().mirror().stats().nodes << " of " << n << " lock nodes";
  const auto loaded = run.daemon().mirror().stats();
  std::printf("[ budget   ] mirror loaded %zu dirs in %.3f s on %zu session(s), largest %zu watched bytes "
              "(budget %zu)\n",
              loaded.dirs, secs(Clock::now() - t), loaded.session_watch_bytes.size(), loaded.max_session_watch_bytes(),
              run.daemon().client().options().watch_budget_bytes);
  EXPECT_LE(loaded.max_session_watch_bytes(), run.daemon().client().options().watch_budget_bytes);
  EXPECT_GE(loaded.session_watch_bytes.size(), 3u) << "40,000 paths of ~45 bytes need ~1.8 MB of watches";
  const auto sid = run.daemon().client().session_id();

  const auto down = Clock::now();
  server.stop();
  server.start();
  const auto up = Clock::now();
  std::printf("[ restart  ] ZooKeeper down and back in %.3f s\n", secs(up - down));

  // A cycle on two lock paths born after the restart: the mirror sees them
  // only through the root's re-armed watch.
  Client ca(session(zk)), cb(session(zk));
  Actor a(ca, "alice"), b(cb, "bob");
  auto c = cross_order(a, b, root + "/x", root + "/y");
  const auto broken_by = c.closed + 30s;
  ASSERT_TRUE(c.b_waits.wait(std::chrono::duration_cast<milliseconds>(broken_by - Clock::now())))
      << "the cycle closed after the restart was not broken within 30 s";
  EXPECT_EQ(c.b_waits.error(), Errc::deadlock_victim) << c.b_waits.message();
  std::printf("[ latency  ] after restart: cycle broken %.3f s after it closed, %.3f s after the server was back\n",
              secs(c.b_waits.at() - c.closed), secs(c.b_waits.at() - up));
  EXPECT_EQ(run.daemon().client().session_id(), sid) << "the restart was inside the session timeout";
  EXPECT_EQ(run.daemon().mirror().stats().resyncs, loaded.resyncs) << "watches, not a re-list, carry the mirror";
  b.release_all();
  expect_granted(c.a_waits, "alice");
}

std::size_t total(const MirrorStats& s) {
  std::size_t sum = 0;
  for (auto b : s.session_watch_bytes) sum += b;
  return sum;
}

// The budget counts each watched path as SetWatches carries it, and a
// directory that goes gives its bytes back to its session (once its watch
// has fired), so new directories fill that room before a session is opened.
TEST(DetectorE2E, TheWatchBudgetCountsEachPathAndGetsBackWhatADeletedDirectoryUsed) {
  const auto zk = test::shared_server().connect_string();
  const auto root = test::unique_path("e2e-budget-count");
  Client admin(session(zk));
  admin.ensure_path(root, CreateMode::persistent);
  plant_lone_locks(admin, root, 40);
  auto options = session(zk);
  options.watch_budget_bytes = 256;
  Client watcher(options);
  Mirror mirror(watcher, MirrorOptions{.root = root});
  mirror.start();
  auto cost = [&](std::size_t from, std::size_t to) {
    std::size_t sum = 0;
    for (auto i = from; i < to; ++i) sum += 4 + root.size() + 2 + std::to_string(i).size();  // "/l<i>"
    return sum;
  };
  const auto root_cost = 2 * (4 + root.size());  // its children watch, and an exists watch while it is missing
  ASSERT_TRUE(eventually([&] { return mirror.stats().nodes == 40 && mirror.idle(); }, 10s));
  const auto full = mirror.stats();
  EXPECT_EQ(total(full), root_cost + cost(0, 40));
  EXPECT_LE(full.max_session_watch_bytes(), 256u);
  const auto sessions = full.session_watch_bytes.size();
  ASSERT_GE(sessions, 4u);

  for (std::size_t i = 0; i < 30; ++i) {
    const auto dir = root + "/l" + std::to_string(i);
    for (const auto& name : admin.children(dir)) admin.remove(dir + "/" + name);
    admin.remove(dir);
  }
  ASSERT_TRUE(eventually([&] { return total(mirror.stats()) == root_cost + cost(30, 40) && mirror.idle(); }, 10s))
      << total(mirror.stats()) << " bytes watched, " << root_cost + cost(30, 40) << " expected";
  EXPECT_EQ(mirror.stats().dirs, 11u);

  plant_lone_locks(admin, root, 30);  // l0..l29 again
  ASSERT_TRUE(eventually([&] { return mirror.stats().nodes == 40 && mirror.idle(); }, 10s));
  EXPECT_EQ(total(mirror.stats()), root_cost + cost(0, 40));
  EXPECT_EQ(mirror.stats().session_watch_bytes.size(), sessions) << "the room given back was used again";
  EXPECT_LE(mirror.stats().max_session_watch_bytes(), 256u);
}

// A listing in flight when the connection drops fails and sets no watch:
// the mirror lists that directory again as soon as its session is back, so
// a cycle through it is seen without waiting for the periodic resync.
TEST(DetectorE2E, AListingCutOffByALostConnectionIsRetriedOnReconnect) {
  auto& server = test::shared_server();
  const auto zk = server.connect_string();
  test::FaultProxy relay(server.port());
  const auto root = test::unique_path("e2e-budget-retry");
  auto cfg = config(relay.connect_string(), root, "e2e-budget-retry");
  cfg.resync_interval = 10min;
  Client admin(session(zk));
  admin.ensure_path(root + "/x", CreateMode::persistent);
  Running run(cfg);
  ASSERT_TRUE(run.daemon().election().wait_leader(10s));
  ASSERT_TRUE(eventually([&] { return run.daemon().mirror().stats().dirs == 2 && run.daemon().mirror().idle(); }, 10s));

  relay.cut_on_request(root + "/y");  // the detector's first listing of y is cut off
  admin.ensure_path(root + "/y", CreateMode::persistent);
  ASSERT_TRUE(eventually([&] { return relay.request_cuts() == 1; }, 10s)) << "the detector never listed " << root << "/y";

  Client c1(session(zk)), c2(session(zk));
  Actor a(c1, "alice"), b(c2, "bob");
  auto c = cross_order(a, b, root + "/x", root + "/y");
  expect_victim(c.b_waits, c.closed, "alice -[" + root + "/y]-> bob -[" + root + "/x]-> alice",
                latency_bound(cfg.min_wait, cfg.interval), "after a cut listing");
  b.release_all();
  expect_granted(c.a_waits, "alice");
}

// A small budget spreads a small tree over several sessions; when they all
// expire (the detector is partitioned away through a relay), each new
// session re-lists its own directories, a change made meanwhile is seen, and
// a cycle formed afterwards is broken.
TEST(DetectorE2E, EveryExpiredWatchSessionReListsItsOwnDirectories) {
  auto& server = test::shared_server();
  const auto zk = server.connect_string();
  test::FaultProxy relay(server.port());
  const auto root = test::unique_path("e2e-budget-expiry");
  Client admin(session(zk));
  admin.ensure_path(root, CreateMode::persistent);
  plant_lone_locks(admin, root, 60);
  auto cfg = config(relay.connect_string(), root, "e2e-budget-expiry");
  cfg.session_timeout = 2s;
  cfg.resync_interval = 10min;
  cfg.watch_budget_bytes = 1024;  // ~20 of these paths per session
  Running run(cfg);
  ASSERT_TRUE(run.daemon().election().wait_leader(10s));
  ASSERT_TRUE(eventually([&] { return run.daemon().mirror().stats().nodes == 60 && run.daemon().mirror().idle(); }, 10s));
  const auto before = run.daemon().mirror().stats();
  const auto sessions = before.session_watch_bytes.size();
  std::printf("[ budget   ] 61 dirs on %zu sessions, largest %zu watched bytes (budget 1024)\n", sessions,
              before.max_session_watch_bytes());
  ASSERT_GE(sessions, 3u);
  EXPECT_LE(before.max_session_watch_bytes(), 1024u);
  const auto candidate = *run.daemon().election().candidate_node();

  relay.refuse(true);
  relay.cut();
  ASSERT_TRUE(eventually([&] { return !admin.try_stat(candidate); }, 15s)) << "the server never expired the detector";
  // Meanwhile one held lock goes away.
  for (const auto& name : admin.children(root + "/l7")) admin.remove(root + "/l7/" + name);
  relay.refuse(false);

  ASSERT_TRUE(eventually(
      [&] {
        const auto s = run.daemon().mirror().stats();
        return s.resyncs >= before.resyncs + sessions && s.nodes == 59 && s.pending == 0;
      },
      20s))
      << "re-lists " << run.daemon().mirror().stats().resyncs - before.resyncs << " of " << sessions << " sessions, "
      << run.daemon().mirror().stats().nodes << " nodes";
  EXPECT_EQ(run.daemon().mirror().stats().session_watch_bytes.size(), sessions) << "a new session, not a new Client";

  Client c1(session(zk)), c2(session(zk));
  Actor a(c1, "alice"), b(c2, "bob");
  auto c = cross_order(a, b, root + "/x", root + "/y");
  expect_victim(c.b_waits, c.closed, "alice -[" + root + "/y]-> bob -[" + root + "/x]-> alice",
                latency_bound(cfg.min_wait, cfg.interval), "after every session expired");
  b.release_all();
  expect_granted(c.a_waits, "alice");
}

}  // namespace
}  // namespace zklock::detector
