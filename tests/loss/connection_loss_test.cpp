// Connection and lease loss against a real ZooKeeper, in one process: the
// create's request or answer lost with the connection, and a held lease
// through a stopped, frozen or unreachable server: lost at the validity
// bound (never later than the server could expire the session), continued
// when the server is back within it, released across an outage, and the
// strict policy's loss at the first disconnect. Each test runs its own server
// behind a fault-injecting proxy; each asserts its outcome and prints the
// figure it measured.
#include <gtest/gtest.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "fault_proxy.hpp"
#include "zk_harness.hpp"
#include "zklock/client.hpp"
#include "zklock/fair_mutex.hpp"
#include "zklock/protocol/node_name.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test::eventually;
using test::FaultProxy;
using test::ms_since;
using test::unique_lock_path;
using test::ZkServer;
using test::ZkServerOptions;

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
// Connection lost during the create.

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
// Lease loss and continuation.

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

}  // namespace
}  // namespace zklock
