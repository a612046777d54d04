// The fair lock's "done when" stories against a real ZooKeeper:
// many processes, a long queue drained, connection loss during create,
// lease loss and continuation, and the sequence counter across its end.
// Every test asserts its outcome and prints the figure it measured.
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <atomic>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

#include "fault_proxy.hpp"
#include "zk_harness.hpp"
#include "zklock/client.hpp"
#include "zklock/fair_mutex.hpp"
#include "zklock/protocol/node_name.hpp"

namespace zklock {
namespace {

using test::FaultProxy;

namespace fs = std::filesystem;
using test::ZkServer;
using test::ZkServerOptions;

// ---------------------------------------------------------------------------
// Helpers

using test::unique_lock_path;

using test::eventually;

using test::ms_since;

// A fresh directory under the system temp dir, removed at scope exit.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "zklock-stories-XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::int64_t counter(const test::Mntr& m, const char* key) {
  auto v = m.counter(key);
  if (!v) throw std::runtime_error(std::string("mntr has no ") + key);
  return *v;
}

// A child's czxid, or nullopt if it does not exist.
std::optional<std::int64_t> czxid_of(Client& c, const std::string& path) {
  auto st = c.try_stat(path);
  if (!st) return std::nullopt;
  return st->czxid;
}


// Records a lease's loss once, for tests to wait on.
struct LossLog {
  std::mutex mu;
  std::condition_variable cv;
  std::optional<LossReason> reason;
  Clock::time_point at;
  void attach(Lease& l) {
    l.on_lost([this](LossReason r, const std::string&) {
      std::lock_guard lk(mu);
      if (!reason) {
        reason = r;
        at = Clock::now();
      }
      cv.notify_all();
    });
  }
  bool wait(std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, timeout, [&] { return reason.has_value(); });
  }
};

// A server of our own for the tests that stop, pause or edit it.
ZkServerOptions own_server_options() { return {.tick = 200ms}; }

// ---------------------------------------------------------------------------
// 1. 20 processes × 50 acquisitions on one lock.

TEST(LockStories, TwentyProcessesFiftyAcquisitionsEachInQueueOrder) {
  constexpr int kProcs = 20, kEach = 50;
  const auto path = unique_lock_path("procs");
  TempDir dir;
  const auto check = dir.path / "inside";
  const auto log = dir.path / "grants.log";
  const auto go = dir.path / "go";
  std::vector<test::ChildProcess> workers;
  for (int i = 0; i < kProcs; ++i) {
    test::SpawnOptions o;
    o.argv = {ZKLOCK_TEST_WORKER, "rounds", "--zk", test::shared_server().connect_string(), "--lock", path,
              "--count", std::to_string(kEach), "--owner", "proc-" + std::to_string(i), "--hold-ms", "1",
              "--check-file", check.string(), "--log-file", log.string(), "--go-file", go.string()};
    workers.push_back(test::ChildProcess::spawn(o));
  }
  for (auto& w : workers) ASSERT_TRUE(w.read_until("ready", 30s)) << "worker did not connect";
  const auto start = Clock::now();
  std::ofstream(go).put('\n');
  for (auto& w : workers) {
    auto st = w.wait_exit(150s);
    ASSERT_TRUE(st) << "worker still running after 150 s";
    std::string lines, line;
    while (auto l = w.read_line(100ms)) lines += *l + "\n";
    EXPECT_TRUE(st->exited() && st->exit_code() == 0) << st->describe() << "\n" << lines;
    EXPECT_EQ(lines.find("violation"), std::string::npos) << lines;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();

  // The append log is the global grant order: czxids strictly increase in it.
  std::ifstream in(log);
  std::string owner;
  int i = 0;
  std::int64_t czxid = 0, last = 0;
  int grants = 0, out_of_order = 0;
  while (in >> owner >> i >> czxid) {
    if (czxid <= last) ++out_of_order;
    last = czxid;
    ++grants;
  }
  EXPECT_EQ(grants, kProcs * kEach);
  EXPECT_EQ(out_of_order, 0);
  Client c({.connect = test::shared_server().connect_string(), .session_timeout = 4s});
  EXPECT_TRUE(c.children(path).empty());
  std::printf("[figure] %d processes x %d acquisitions: %d grants in %.2f s (%.0f/s), %d out of queue order, "
              "0 exclusion violations\n",
              kProcs, kEach, grants, secs, grants / secs, out_of_order);
}

// ---------------------------------------------------------------------------
// 2. 1,000 waiters over 20 sessions, queued then drained: per-acquisition cost
// and wake-ups, compared with 100 waiters.

struct DrainFigures {
  int waiters = 0;
  double response_bytes = 0, watch_bytes = 0, packets_received = 0, packets_sent = 0;  // per acquisition
  std::int64_t watch_bytes_total = 0;
  std::int64_t expected_notifications = 0;  // successor wake-ups + releasers' own-node watches
  std::size_t node_path_length = 0;
  double seconds = 0;
  int out_of_order = 0, overlaps = 0, failed = 0;
};

DrainFigures drain(ZkServer& srv, int waiters, int sessions) {
  DrainFigures f;
  f.waiters = waiters;
  const auto path = unique_lock_path("drain");
  const ClientOptions opts{.connect = srv.connect_string(), .session_timeout = 4s};
  Client holder_client(opts);
  FairMutex holder_mutex(holder_client, path);
  Lease holder = holder_mutex.acquire({.owner = "holder"});

  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::unique_ptr<FairMutex>> mutexes;
  for (int s = 0; s < sessions; ++s) {
    clients.push_back(std::make_unique<Client>(opts));
    mutexes.push_back(std::make_unique<FairMutex>(*clients.back(), path));
  }
  struct Grant {
    std::int64_t czxid;
    std::int64_t session;
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Grant> grants;
  int released = 0;  // GUARDED_BY(mu): releases the server has answered
  std::atomic<int> inside{0}, overlaps{0}, failed{0};
  for (int i = 0; i < waiters; ++i) {
    const auto s = static_cast<std::size_t>(i % sessions);
    const auto session = clients[s]->session_id();
    mutexes[s]->acquire_async(
        [&, session](AcquireResult r) {
          if (r.error) {
            ++failed;
          } else {
            if (inside.fetch_add(1) != 0) ++overlaps;
            {
              std::lock_guard lk(mu);
              grants.push_back({r.lease.token().czxid(), session});
            }
            inside.fetch_sub(1);
            // The counters are read once every release is answered: the
            // last release's notification must be in them.
            r.lease.release_async([&] {
              std::lock_guard lk(mu);
              ++released;
              cv.notify_all();
            });
            return;
          }
          std::lock_guard lk(mu);
          cv.notify_all();
        },
        {.owner = "w-" + std::to_string(i)});
  }
  // Queued: every waiter's node exists, and every watch the queue needs is
  // set (each waiter watches its own node and its predecessor; one session's
  // watches on one node are one server-side watch).
  EXPECT_TRUE(eventually([&] { return holder_client.children(path).size() == static_cast<std::size_t>(waiters + 1); },
                         60s));
  auto kids = holder_client.children(path);
  std::sort(kids.begin(), kids.end(), [](const std::string& a, const std::string& b) {
    return compare_sequence(parse_lock_node_name(a)->sequence, parse_lock_node_name(b)->sequence) < 0;
  });
  std::set<std::pair<std::string, std::int64_t>> watch_pairs;
  for (std::size_t k = 0; k < kids.size(); ++k) {
    const auto owner = holder_client.stat(path + "/" + kids[k]).ephemeral_owner;
    watch_pairs.insert({kids[k], owner});
    if (k > 0) watch_pairs.insert({kids[k - 1], owner});
  }
  f.node_path_length = path.size() + 1 + kids.front().size();
  const auto want_watches = static_cast<std::int64_t>(watch_pairs.size());
  EXPECT_TRUE(eventually([&] { return counter(srv.mntr(), "zk_watch_count") == want_watches; }, 30s))
      << "watch count " << counter(srv.mntr(), "zk_watch_count") << ", want " << want_watches;

  const auto m0 = srv.mntr();
  const auto start = Clock::now();
  const auto holder_czxid = holder.token().czxid();
  const auto holder_session = holder_client.session_id();
  holder.release();
  {
    std::unique_lock lk(mu);
    EXPECT_TRUE(cv.wait_for(lk, 120s, [&] { return released + failed.load() == waiters; }))
        << grants.size() << " granted, " << released << " released, " << failed << " failed";
  }
  f.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  // The server adds a notification's bytes after sending it (see
  // notification_bytes), so the last release's may not be counted yet when
  // its answer is in: read the counters once zk_watch_bytes stops moving.
  auto m1 = srv.mntr();
  EXPECT_TRUE(eventually([&] {
    auto m = srv.mntr();
    const bool settled = counter(m, "zk_watch_bytes") == counter(m1, "zk_watch_bytes");
    m1 = std::move(m);
    return settled;
  }, 10s));
  const double n = waiters;
  f.response_bytes = (counter(m1, "zk_response_bytes") - counter(m0, "zk_response_bytes")) / n;
  f.watch_bytes_total = counter(m1, "zk_watch_bytes") - counter(m0, "zk_watch_bytes");
  f.watch_bytes = f.watch_bytes_total / n;
  f.packets_received = (counter(m1, "zk_packets_received") - counter(m0, "zk_packets_received")) / n;
  f.packets_sent = (counter(m1, "zk_packets_sent") - counter(m0, "zk_packets_sent")) / n;
  f.overlaps = overlaps;
  f.failed = failed;

  // Each release notifies its releaser (own-node watch) and its successor
  // (blocker watch); one notification when both are the same session.
  std::lock_guard lk(mu);
  std::int64_t last = holder_czxid, prev_session = holder_session;
  for (const auto& g : grants) {
    if (g.czxid <= last) ++f.out_of_order;
    last = g.czxid;
    f.expected_notifications += g.session == prev_session ? 1 : 2;
    prev_session = g.session;
  }
  f.expected_notifications += 1;  // the last release
  EXPECT_TRUE(eventually([&] { return holder_client.children(path).empty(); }));
  return f;
}

// Bytes of one watch notification for a node path of `length` characters,
// measured on `srv` (nothing else may be watched meanwhile).
std::int64_t notification_bytes(ZkServer& srv, std::size_t length) {
  Client c({.connect = srv.connect_string(), .session_timeout = 4s});
  std::string probe = "/probe-";
  probe.resize(length, 'x');
  std::promise<void> created, fired;
  c.create_async(probe, "", CreateMode::ephemeral, [&](Status st, const std::string&, const Stat&) {
    EXPECT_TRUE(st.ok());
    created.set_value();
  });
  created.get_future().wait();
  std::promise<void> set;
  c.stat_async(probe, [&](const WatchEvent&) { fired.set_value(); }, [&](Status, const Stat&) { set.set_value(); });
  set.get_future().wait();
  const auto before = counter(srv.mntr(), "zk_watch_bytes");
  c.remove_async(probe, -1, [](Status) {});
  EXPECT_EQ(fired.get_future().wait_for(5s), std::future_status::ready);
  // The server counts a notification's bytes after sending it: the client
  // can see the event before mntr does. Wait (bounded) for the count.
  std::int64_t bytes = 0;
  eventually([&] { return (bytes = counter(srv.mntr(), "zk_watch_bytes") - before) > 0; }, 5s);
  return bytes;
}

TEST(LockStories, ThousandWaitersDrainAtConstantCostPerAcquisition) {
  ZkServer srv(own_server_options());
  srv.start();
  constexpr int kSessions = 20;
  const auto small = drain(srv, 100, kSessions);
  const auto large = drain(srv, 1000, kSessions);
  const auto per_notification = notification_bytes(srv, large.node_path_length);
  ASSERT_GT(per_notification, 0);
  for (const auto* f : {&small, &large}) {
    std::printf("[figure] drain of %4d waiters over %d sessions: %.2f s, per acquisition: %.1f reply bytes, "
                "%.1f watch bytes, %.2f packets received, %.2f packets sent; notifications %lld (expected %lld: "
                "one successor + the releaser's own watch per release)\n",
                f->waiters, kSessions, f->seconds, f->response_bytes, f->watch_bytes, f->packets_received,
                f->packets_sent, static_cast<long long>(f->watch_bytes_total / per_notification),
                static_cast<long long>(f->expected_notifications));
    EXPECT_EQ(f->failed, 0);
    EXPECT_EQ(f->overlaps, 0);
    EXPECT_EQ(f->out_of_order, 0);
    EXPECT_EQ(f->watch_bytes_total % per_notification, 0);
    EXPECT_EQ(f->watch_bytes_total / per_notification, f->expected_notifications) << "a release woke more than one waiter";
  }
  auto within = [](double at1000, double at100) { return std::abs(at1000 - at100) <= 0.10 * at100; };
  EXPECT_TRUE(within(large.response_bytes, small.response_bytes))
      << large.response_bytes << " vs " << small.response_bytes;
  EXPECT_TRUE(within(large.packets_received, small.packets_received))
      << large.packets_received << " vs " << small.packets_received;
  EXPECT_TRUE(within(large.packets_sent, small.packets_sent)) << large.packets_sent << " vs " << small.packets_sent;
  std::printf("[figure] 1000 vs 100 waiters: reply bytes/acq %.1f vs %.1f (%+.1f %%), packets/acq %.2f vs %.2f "
              "(%+.1f %%)\n",
              large.response_bytes, small.response_bytes, 100 * (large.response_bytes / small.response_bytes - 1),
              large.packets_received + large.packets_sent, small.packets_received + small.packets_sent,
              100 * ((large.packets_received + large.packets_sent) / (small.packets_received + small.packets_sent) - 1));
}

// ---------------------------------------------------------------------------
// 3. Connection lost during create.

struct LossFixture : ::testing::Test {
  void SetUp() override {
    srv = std::make_unique<ZkServer>(own_server_options());
    srv->start();
    proxy = std::make_unique<FaultProxy>(srv->port());
    direct = std::make_unique<Client>(ClientOptions{.connect = srv->connect_string(), .session_timeout = 4s});
  }
  void TearDown() override {
    direct.reset();
    proxy.reset();
    if (srv && srv->paused()) srv->resume();
    srv.reset();
  }
  // A client through the proxy, warmed up so that an acquire starts with the
  // create (ensemble id cached, lock path present).
  std::unique_ptr<Client> proxied_client(const std::string& path) {
    auto c = std::make_unique<Client>(ClientOptions{.connect = proxy->connect_string(), .session_timeout = 4s});
    c->ensemble_id();
    c->ensure_path(path);
    return c;
  }
  std::unique_ptr<ZkServer> srv;
  std::unique_ptr<FaultProxy> proxy;
  std::unique_ptr<Client> direct;  // sees the server's truth
};

using CreateLoss = LossFixture;

// The create runs on the server, its answer is lost with the connection; the
// same session comes back and finds the node by its GUID.
TEST_F(CreateLoss, AnswerLostAfterTheCreateRanIsAdopted) {
  const auto path = unique_lock_path("create-answer-lost");
  auto c = proxied_client(path);
  FairMutex m(*c, path);
  proxy->drop_replies(true);
  auto r = std::async(std::launch::async, [&] { return m.try_acquire_for(20s); });
  ASSERT_TRUE(eventually([&] { return direct->children(path).size() == 1; })) << "the create never ran";
  const auto node = path + "/" + direct->children(path).front();
  const auto cut = Clock::now();
  proxy->cut();
  proxy->drop_replies(false);
  ASSERT_EQ(r.wait_for(15s), std::future_status::ready);
  auto lease = r.get();
  ASSERT_TRUE(lease);
  EXPECT_EQ(lease->node_path(), node);
  EXPECT_EQ(lease->token().czxid(), czxid_of(*direct, node).value_or(-1));
  EXPECT_EQ(direct->children(path).size(), 1u);
  std::printf("[figure] create answer lost: node adopted by GUID, granted %.0f ms after the cut\n", ms_since(cut));
  lease->release();
  EXPECT_TRUE(direct->children(path).empty());
}

// The create never reaches the server: the same session comes back, finds no
// node with its GUID, and creates it.
TEST_F(CreateLoss, RequestLostBeforeTheCreateRanIsRetried) {
  const auto path = unique_lock_path("create-request-lost");
  auto c = proxied_client(path);
  FairMutex m(*c, path);
  proxy->drop_requests(true);
  auto r = std::async(std::launch::async, [&] { return m.try_acquire_for(20s); });
  ASSERT_TRUE(eventually([&] { return proxy->dropped_request_bytes() > 0; }));
  const auto cut = Clock::now();
  proxy->cut();
  proxy->drop_requests(false);
  ASSERT_EQ(r.wait_for(15s), std::future_status::ready);
  auto lease = r.get();
  ASSERT_TRUE(lease);
  EXPECT_EQ(direct->children(path).size(), 1u);
  std::printf("[figure] create request lost: created again, granted %.0f ms after the cut\n", ms_since(cut));
  lease->release();
  EXPECT_TRUE(direct->children(path).empty());
}

// The wait is abandoned (timeout) while the create's answer is still out; the
// create did run. Once the same session is back, the node must be deleted:
// a live session's orphan would block the lock for everyone.
TEST_F(CreateLoss, AbandonedWhileTheCreateAnswerIsOutLeavesNoOrphan) {
  const auto path = unique_lock_path("create-abandoned");
  auto c = proxied_client(path);
  FairMutex m(*c, path);
  proxy->drop_replies(true);
  auto r = std::async(std::launch::async, [&] { return m.try_acquire_for(300ms); });
  ASSERT_TRUE(eventually([&] { return direct->children(path).size() == 1; })) << "the create never ran";
  ASSERT_EQ(r.wait_for(5s), std::future_status::ready);
  EXPECT_FALSE(r.get()) << "a timeout, cleanly";
  const auto cut = Clock::now();
  proxy->cut();
  proxy->drop_replies(false);
  ASSERT_TRUE(c->wait_connected(10s));
  const bool cleaned = eventually([&] { return direct->children(path).empty(); }, 5s);
  EXPECT_TRUE(cleaned) << "orphan node left behind by a live session: " << direct->children(path).front();
  std::printf("[figure] abandoned during lost create: orphan %s %.0f ms after the cut\n",
              cleaned ? "deleted" : "NOT deleted", ms_since(cut));
  // And the lock is free for someone else.
  FairMutex other(*direct, path);
  EXPECT_TRUE(other.try_acquire_for(2s));
}

// ---------------------------------------------------------------------------
// 4. Loss and continuation.

using LeaseLoss = LossFixture;

TEST_F(LeaseLoss, ServerStoppedPastTheBoundLosesTheLeaseBeforeTheServerCouldExpireIt) {
  const auto path = unique_lock_path("validity");
  Client c({.connect = srv->connect_string(), .session_timeout = 4s});
  FairMutex m(c, path);
  Lease l = m.acquire();
  LossLog loss;
  loss.attach(l);
  const auto node = l.node_path();
  const auto stop = Clock::now();
  srv->stop();
  ASSERT_TRUE(loss.wait(c.negotiated_timeout() + 2s));
  EXPECT_EQ(loss.reason, LossReason::validity_expired);
  EXPECT_FALSE(l.valid());
  // valid_until() = send time of the last acknowledged request + timeout -
  // margin: the server saw that request, so it cannot expire the session
  // before valid_until() + margin. The loss came after the bound (not early)
  // and before that instant.
  const auto vu = c.valid_until();
  const auto margin = std::max<std::chrono::milliseconds>(c.negotiated_timeout() / 10, 20ms);
  EXPECT_GE(loss.at, vu);
  EXPECT_LT(loss.at, vu + margin);
  EXPECT_LT(loss.at, stop + c.negotiated_timeout());
  std::printf("[figure] server stopped: lease lost (validity_expired) %.0f ms after the stop; the server could "
              "not expire the session before %.0f ms (negotiated %lld ms)\n",
              std::chrono::duration<double, std::milli>(loss.at - stop).count(),
              std::chrono::duration<double, std::milli>(vu + margin - stop).count(),
              static_cast<long long>(c.negotiated_timeout().count()));
  // The server comes back, the session with it: the lost lease's node goes.
  srv->start();
  ASSERT_TRUE(c.wait_connected(10s));
  // The observer reconnects on its own schedule (the C client backs off
  // after trying every server); a read before that times out and throws.
  ASSERT_TRUE(direct->wait_connected(10s));
  EXPECT_TRUE(eventually([&] { return !czxid_of(*direct, node); })) << "lost lease's node not deleted";
}

// The natural reaction to a loss: release and drop the lease. The server is
// still down when release() gives up waiting; it comes back later and with it
// the session (a restarted server restores sessions). The node must go then,
// or a live session holds the lock for nobody.
TEST_F(LeaseLoss, LeaseDroppedWhileTheServerIsDownIsDeletedWhenTheSessionReturns) {
  const auto path = unique_lock_path("dropped-while-down");
  Client c({.connect = srv->connect_string(), .session_timeout = 4s});
  FairMutex m(c, path);
  auto l = std::make_unique<Lease>(m.acquire());
  LossLog loss;
  loss.attach(*l);
  const auto node = l->node_path();
  const auto session = c.session_id();
  srv->stop();
  ASSERT_TRUE(loss.wait(c.negotiated_timeout() + 2s)) << "no loss while the server was down";
  const auto t = Clock::now();
  l->release();  // cannot reach the server: gives up after its bounded wait
  l.reset();
  std::printf("[figure] release() while the server is down returned after %.0f ms\n", ms_since(t));
  srv->start();
  ASSERT_TRUE(c.wait_connected(10s)) << "no reconnect within 10 s of the restart; state "
                                     << state_name(c.state());
  ASSERT_EQ(c.session_id(), session) << "the restarted server should have restored the session (epoch "
                                     << c.session_epoch() << ")";
  const auto back = Clock::now();
  ASSERT_TRUE(direct->wait_connected(10s));  // the observer too, or its read times out and throws
  const bool deleted = eventually([&] { return !czxid_of(*direct, node); }, 5s);
  EXPECT_TRUE(deleted) << "the dropped lease's node outlived it in a live session";
  std::printf("[figure] dropped lease's node %s %.0f ms after the session returned\n",
              deleted ? "deleted" : "NOT deleted", ms_since(back));
  FairMutex other(*direct, path);
  EXPECT_TRUE(other.try_acquire_for(2s)) << "the lock is blocked by an orphan";
}

// release() of a suspended lease: the delete waits for the connection, and
// release() returns as soon as the same session is back and the node is gone
// (not after its full bounded wait), handing the lock on with the marker.
TEST_F(LeaseLoss, ReleaseWhileDisconnectedCompletesWhenTheSessionReturns) {
  const auto path = unique_lock_path("release-suspended");
  Client c({.connect = proxy->connect_string(), .session_timeout = 4s});
  FairMutex m(c, path);
  Lease l = m.acquire({.owner = "holder"});
  const auto node = l.node_path();
  FairMutex wm(*direct, path);
  std::promise<AcquireResult> waiter;
  wm.acquire_async([&](AcquireResult r) { waiter.set_value(std::move(r)); }, {.owner = "waiter"});
  ASSERT_TRUE(eventually([&] { return direct->children(path).size() == 2; }));
  proxy->refuse(true);
  proxy->cut();
  ASSERT_TRUE(eventually([&] { return l.suspended(); }, 3s));
  const auto t = Clock::now();
  auto released = std::async(std::launch::async, [&] { l.release(); });
  // An outage of 300 ms after release() was called, then the server is reachable.
  std::this_thread::sleep_for(300ms);
  proxy->refuse(false);
  ASSERT_EQ(released.wait_for(c.negotiated_timeout() + 3s), std::future_status::ready);
  const double took = ms_since(t);
  EXPECT_FALSE(czxid_of(*direct, node));
  EXPECT_LT(took, 2000) << "release() waited out its bound although the session came back";
  auto wf = waiter.get_future();
  ASSERT_EQ(wf.wait_for(5s), std::future_status::ready);
  auto wr = wf.get();
  ASSERT_FALSE(wr.error);
  EXPECT_EQ(direct->try_get(path).value_or(""), split_path(node).second) << "hand-off marker";
  std::printf("[figure] release() during a 300 ms outage returned after %.0f ms; the waiter was granted\n", took);
}

// release_async() during an outage returns at once; its callback runs when
// the same session is back and the node is deleted.
TEST_F(LeaseLoss, ReleaseAsyncDuringAnOutageCompletesWhenTheSessionReturns) {
  const auto path = unique_lock_path("release-async-outage");
  Client c({.connect = proxy->connect_string(), .session_timeout = 4s});
  FairMutex m(c, path);
  Lease l = m.acquire();
  const auto node = l.node_path();
  proxy->refuse(true);
  proxy->cut();
  ASSERT_TRUE(eventually([&] { return l.suspended(); }, 3s));
  std::promise<void> done;
  const auto t = Clock::now();
  l.release_async([&] { done.set_value(); });
  EXPECT_LT(ms_since(t), 100) << "release_async() waited for the server";
  auto df = done.get_future();
  EXPECT_EQ(df.wait_for(300ms), std::future_status::timeout) << "done ran while the node still existed";
  EXPECT_TRUE(czxid_of(*direct, node));
  proxy->refuse(false);
  ASSERT_EQ(df.wait_for(c.negotiated_timeout() + 3s), std::future_status::ready)
      << "no callback after the session came back";
  EXPECT_FALSE(czxid_of(*direct, node));
  std::printf("[figure] release_async() during an outage: node deleted, callback %.0f ms after the call\n",
              ms_since(t));
}

// The session expires while release_async()'s delete waits for a
// connection: the node went with the session, so the callback still runs.
TEST_F(LeaseLoss, ReleaseAsyncPendingWhenTheSessionExpiresStillCompletes) {
  const auto path = unique_lock_path("release-async-expiry");
  Client c({.connect = proxy->connect_string(), .session_timeout = 4s});
  FairMutex m(c, path);
  Lease l = m.acquire();
  const auto node = l.node_path();
  const auto session = c.session_id();
  proxy->refuse(true);
  proxy->cut();
  ASSERT_TRUE(eventually([&] { return l.suspended(); }, 3s));
  std::promise<void> done;
  l.release_async([&] { done.set_value(); });
  // The server expires the session it cannot hear from, deleting the node.
  ASSERT_TRUE(eventually([&] { return !czxid_of(*direct, node); }, c.negotiated_timeout() + 6s))
      << "the server never expired the unreachable session";
  proxy->refuse(false);
  auto df = done.get_future();
  ASSERT_EQ(df.wait_for(10s), std::future_status::ready) << "release_async's callback was lost with the session";
  EXPECT_TRUE(c.wait_connected(10s));
  EXPECT_NE(c.session_id(), session) << "expected a new session after the expiry";
}

TEST_F(LeaseLoss, ServerBackWithinTheBoundContinuesTheSameLease) {
  const auto path = unique_lock_path("continue");
  Client c({.connect = proxy->connect_string(), .session_timeout = 4s});
  FairMutex m(c, path);
  Lease l = m.acquire();
  LossLog loss;
  loss.attach(l);
  const auto node = l.node_path();
  const auto token = l.token();
  const auto session = c.session_id();
  // The server freezes and the connection drops; the client cannot reach it.
  srv->pause();
  const auto down = Clock::now();
  proxy->cut();
  ASSERT_TRUE(eventually([&] { return l.suspended(); }, 3s));
  EXPECT_TRUE(l.valid()) << "suspended but within the bound";
  // An outage of 400 ms, then the server is back (well within the bound).
  std::this_thread::sleep_for(400ms);
  srv->resume();
  ASSERT_TRUE(eventually([&] { return c.state() == ConnectionState::reconnected; }, 5s));
  const double outage = ms_since(down);
  ASSERT_TRUE(eventually([&] { return !l.suspended(); }, 2s));
  EXPECT_TRUE(l.valid());
  EXPECT_FALSE(l.loss_reason());
  EXPECT_EQ(c.session_id(), session);
  EXPECT_EQ(l.node_path(), node);
  EXPECT_EQ(l.token(), token);
  EXPECT_EQ(czxid_of(*direct, node).value_or(-1), token.czxid());
  std::printf("[figure] server frozen and unreachable for %.0f ms: same session, same node, same token, valid\n",
              outage);
  l.release();
  EXPECT_FALSE(czxid_of(*direct, node));
}

TEST_F(LeaseLoss, StrictPolicyLosesAtFirstDisconnectAndDeletesTheNodeAfterReconnect) {
  const auto path = unique_lock_path("strict");
  Client c({.connect = proxy->connect_string(), .session_timeout = 4s});
  FairMutex m(c, path, MutexOptions{.loss_policy = LossPolicy::strict});
  Lease l = m.acquire({.owner = "strict-holder"});
  LossLog loss;
  loss.attach(l);
  const auto node = l.node_path();
  // A waiter on another session gets the lock once the node is gone.
  FairMutex wm(*direct, path);
  std::promise<AcquireResult> waiter;
  wm.acquire_async([&](AcquireResult r) { waiter.set_value(std::move(r)); }, {.owner = "waiter"});
  ASSERT_TRUE(eventually([&] { return direct->children(path).size() == 2; }));
  proxy->refuse(true);
  const auto cut = Clock::now();
  proxy->cut();
  ASSERT_TRUE(loss.wait(3s));
  EXPECT_EQ(loss.reason, LossReason::disconnected);
  EXPECT_FALSE(l.valid());
  const double lost_after = std::chrono::duration<double, std::milli>(loss.at - cut).count();
  EXPECT_TRUE(czxid_of(*direct, node)) << "the node stays while we cannot reach the server";
  proxy->refuse(false);
  const auto back = Clock::now();
  ASSERT_TRUE(eventually([&] { return !czxid_of(*direct, node); }, 10s)) << "node not deleted after reconnect";
  const double deleted_after = ms_since(back);
  auto wf = waiter.get_future();
  ASSERT_EQ(wf.wait_for(5s), std::future_status::ready);
  auto wr = wf.get();
  ASSERT_FALSE(wr.error);
  EXPECT_TRUE(wr.lease.token() > l.token());
  std::printf("[figure] strict policy: lost %.0f ms after the disconnect; node deleted %.0f ms after the server "
              "became reachable; the waiter was granted\n",
              lost_after, deleted_after);
}

// ---------------------------------------------------------------------------
// 5. The sequence counter across its end.

// Contenders queued one by one on a few sessions, then granted in turn. Each
// records its grant (order, token) and checks that nobody else is inside.
class Contenders {
 public:
  Contenders(const std::string& connect, const std::string& path, int sessions, std::chrono::milliseconds timeout)
      : path_(path) {
    for (int s = 0; s < sessions; ++s) {
      clients_.push_back(std::make_unique<Client>(ClientOptions{.connect = connect, .session_timeout = timeout}));
      mutexes_.push_back(std::make_unique<FairMutex>(*clients_.back(), path));
    }
  }
  ~Contenders() {
    for (auto& t : threads_) t.join();
  }
  // Queues contender `id` and returns once its node is listed.
  void queue(int id, Client& observer) {
    const auto before = observer.children(path_).size();
    auto& m = *mutexes_[static_cast<std::size_t>(id) % mutexes_.size()];
    threads_.emplace_back([this, &m, id] {
      try {
        Lease l = m.acquire({.owner = "c-" + std::to_string(id)});
        if (inside_.fetch_add(1) != 0) ++overlaps_;
        {
          std::lock_guard lk(mu_);
          order_.push_back(id);
          tokens_.push_back(l.token());
          names_.push_back(split_path(l.node_path()).second);
        }
        std::this_thread::sleep_for(2ms);  // a critical section others could overlap with
        if (!l.valid()) ++invalid_;
        inside_.fetch_sub(1);
        l.release();
      } catch (const std::exception& e) {
        std::lock_guard lk(mu_);
        errors_.push_back(e.what());
      }
      std::lock_guard lk(mu_);
      cv_.notify_all();
    });
    EXPECT_TRUE(eventually([&] { return observer.children(path_).size() == before + 1; }));
  }
  bool wait_all(std::size_t n, std::chrono::milliseconds timeout) {
    std::unique_lock lk(mu_);
    return cv_.wait_for(lk, timeout, [&] { return order_.size() + errors_.size() >= n; });
  }
  // Asserts grants in queue order (ids 0..n-1), tokens increasing after
  // `after`, never two holders; returns the node names in grant order.
  std::vector<std::string> check(std::size_t n, const FencingToken& after) {
    std::lock_guard lk(mu_);
    EXPECT_TRUE(errors_.empty()) << errors_.front();
    EXPECT_EQ(overlaps_.load(), 0);
    EXPECT_EQ(invalid_.load(), 0);
    EXPECT_EQ(order_.size(), n);
    for (std::size_t i = 0; i < order_.size(); ++i) EXPECT_EQ(order_[i], static_cast<int>(i)) << "grant " << i;
    for (std::size_t i = 0; i < tokens_.size(); ++i)
      EXPECT_TRUE((i == 0 ? after : tokens_[i - 1]) < tokens_[i]) << "token " << i;
    return names_;
  }
  Client& client(int i) { return *clients_[static_cast<std::size_t>(i)]; }

 private:
  std::string path_;
  std::vector<std::unique_ptr<Client>> clients_;
  std::vector<std::unique_ptr<FairMutex>> mutexes_;
  std::vector<std::thread> threads_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<int> order_;
  std::vector<FencingToken> tokens_;
  std::vector<std::string> names_;
  std::vector<std::string> errors_;
  std::atomic<int> inside_{0}, overlaps_{0}, invalid_{0};
};

std::string suffixes(const std::vector<std::string>& names) {
  std::string out;
  for (const auto& n : names) out += (out.empty() ? "" : " ") + n.substr(n.rfind('_') + 1);
  return out;
}

TEST(SequenceEnd, SaturatedCounterKeepsFifoAndOneHolder) {
  if (!test::child_sequence_tool_available()) GTEST_SKIP() << "SetCversion tool not built";
  ZkServer srv(own_server_options());
  srv.start();
  const auto path = unique_lock_path("saturate");
  test::set_child_sequence_counter(srv, path, INT32_MAX - 3, /*container=*/true);
  Client observer({.connect = srv.connect_string(), .session_timeout = 4s});
  FairMutex hm(observer, path);
  Lease holder = hm.acquire({.owner = "holder"});
  const auto holder_token = holder.token();
  constexpr int kContenders = 8;  // 2147483645..2147483647, then five more at 2147483647
  Contenders cs(srv.connect_string(), path, 3, 4s);
  for (int i = 0; i < kContenders; ++i) cs.queue(i, observer);
  int saturated = 0;
  for (const auto& k : observer.children(path)) saturated += parse_lock_node_name(k)->sequence == INT32_MAX;
  EXPECT_GE(saturated, 5) << "the server did not saturate the counter";
  holder.release();
  ASSERT_TRUE(cs.wait_all(kContenders, 30s));
  const auto names = cs.check(kContenders, holder_token);
  std::printf("[figure] saturation: holder %d, then %d contenders granted in queue order with suffixes [%s]; "
              "%d nodes shared suffix 2147483647\n",
              holder_token.sequence(), kContenders, suffixes(names).c_str(), saturated);
}

TEST(SequenceEnd, WrappedCounterKeepsFifoAndOneHolder) {
  if (!test::child_sequence_tool_available()) GTEST_SKIP() << "SetCversion tool not built";
  // The restart that sets the counter takes a few seconds (stop, edit, JVM
  // start): sessions get 10 s so the holder's lease survives it.
  ZkServer srv({.tick = 200ms, .max_session_timeout = 10s});
  srv.start();
  const auto path = unique_lock_path("wrap");
  test::set_child_sequence_counter(srv, path, INT32_MAX - 3, /*container=*/true);
  Client observer({.connect = srv.connect_string(), .session_timeout = 10s});
  FairMutex hm(observer, path);
  Lease holder = hm.acquire({.owner = "holder"});
  const auto holder_token = holder.token();
  Contenders cs(srv.connect_string(), path, 3, 10s);
  constexpr int kBefore = 3, kAfter = 4;  // 2147483645..2147483647, then -2147483648..-2147483645
  for (int i = 0; i < kBefore; ++i) cs.queue(i, observer);
  const auto down = Clock::now();
  test::set_child_sequence_counter(srv, path, INT32_MIN);
  const double restart_ms = ms_since(down);
  ASSERT_TRUE(observer.wait_connected(10s));
  for (int i = 0; i < kBefore; ++i) ASSERT_TRUE(cs.client(i).wait_connected(10s));
  ASSERT_TRUE(holder.valid()) << "the holder's lease did not survive the restart (" << restart_ms << " ms)";
  for (int i = kBefore; i < kBefore + kAfter; ++i) cs.queue(i, observer);
  int negative = 0;
  for (const auto& k : observer.children(path)) negative += parse_lock_node_name(k)->sequence < 0;
  EXPECT_EQ(negative, kAfter) << "the counter did not wrap";
  holder.release();
  ASSERT_TRUE(cs.wait_all(kBefore + kAfter, 30s));
  const auto names = cs.check(kBefore + kAfter, holder_token);
  std::printf("[figure] wrap: server restarted in %.0f ms with the counter at -2147483648; holder %d, then %d "
              "contenders granted in queue order with suffixes [%s]\n",
              restart_ms, holder_token.sequence(), kBefore + kAfter, suffixes(names).c_str());
}

}  // namespace
}  // namespace zklock
