// Retained leases (issue 16) against a real ZooKeeper: what a re-take costs
// (counted by the server), that a waiter is never starved by an idle
// retained node, that tokens keep increasing, and what happens when the
// idle node is deleted under us.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <future>
#include <regex>
#include <sstream>
#include <thread>

#include "client_impl.hpp"  // armed_watches (lib/src)
#include "fault_proxy.hpp"
#include "zk_harness.hpp"
#include "zklock/fair_mutex.hpp"
#include "zklock/protocol/revoke.hpp"
#include "zklock/shared_mutex.hpp"
#include "zklock/protocol/node_name.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;
using test::eventually;
using test::ms_since;
using test::unique_lock_path;

ClientOptions opts_for(const std::string& connect) { return {.connect = connect, .session_timeout = 4s}; }
ClientOptions shared_opts() { return opts_for(test::shared_server().connect_string()); }

// The server's last zxid, from `srvr`: one per write transaction.
std::int64_t server_zxid(const test::ZkServer& s) {
  auto text = test::four_letter_word("127.0.0.1", s.port(), "srvr");
  if (!text) return -1;
  std::smatch m;
  if (!std::regex_search(*text, m, std::regex("Zxid: 0x([0-9a-fA-F]+)"))) return -1;
  return std::stoll(m[1].str(), nullptr, 16);
}

std::int64_t requests(test::ZkServer& s) { return s.mntr().counter("zk_packets_received").value_or(0); }

// One session re-taking one lock: each re-take is one write (the setData)
// and one read (the listing); a release sends nothing. Counted by the
// server on a server of our own (no other client's traffic).
TEST(Retain, ReTakeCostsOneWriteAndOneReadAndReleaseNothing) {
  test::ZkServer server;
  server.start();
  Client c(opts_for(server.connect_string()));
  const auto path = unique_lock_path("retain-cost");
  FairMutex m(c, path, {.retain = 5s});
  Lease first = m.acquire();
  const auto node = first.node_path();
  FencingToken last = first.token();
  first.release();
  ASSERT_TRUE(c.try_stat(node)) << "a release with nobody waiting keeps the node";

  constexpr int kCycles = 20;
  std::int64_t acquire_req = 0, release_req = 0, acquire_writes = 0, release_writes = 0;
  for (int i = 0; i < kCycles; ++i) {
    const auto r0 = requests(server);
    const auto z0 = server_zxid(server);
    Lease l = m.acquire();
    const auto r1 = requests(server);
    const auto z1 = server_zxid(server);
    l.release();
    const auto r2 = requests(server);
    const auto z2 = server_zxid(server);
    EXPECT_EQ(l.node_path(), node) << "a re-take reuses the node";
    EXPECT_TRUE(l.token() > last) << "cycle " << i;
    EXPECT_FALSE(l.valid());
    last = l.token();
    acquire_req += r1 - r0 - 2;  // less our own srvr and mntr (each counts one)
    release_req += r2 - r1 - 2;
    acquire_writes += z1 - z0;
    release_writes += z2 - z1;
  }
  std::printf("[ retain   ] per re-take: %.2f requests, %.2f writes; per release: %.2f requests, %.2f writes\n",
              double(acquire_req) / kCycles, double(acquire_writes) / kCycles, double(release_req) / kCycles,
              double(release_writes) / kCycles);
  EXPECT_EQ(acquire_writes, kCycles);
  EXPECT_EQ(release_writes, 0);
  // Two requests per re-take; pings of the idle session may add a few.
  EXPECT_GE(acquire_req, 2 * kCycles);
  EXPECT_LE(acquire_req, 2 * kCycles + 3);
  EXPECT_LE(release_req, 3);
}

// Many re-takes with nobody else queueing keep one children watch. The C
// client holds a callback for every watching call until the watch fires, and
// re-arming on each re-take grew that list by one per re-take without bound
// (and fired all of it at the first waiter). The one watch still ends the
// retention at once when a waiter comes.
TEST(Retain, ManyReTakesKeepOneChildrenWatchThatStillSeesTheNextWaiter) {
  Client c1(shared_opts()), c2(shared_opts());
  auto& impl = *detail::ClientAccess::impl(c1);
  const auto path = unique_lock_path("retain-watches");
  FairMutex m1(c1, path, {.retain = 60s});
  FairMutex m2(c2, path);
  Lease first = m1.acquire();
  FencingToken last = first.token();
  first.release();
  const auto armed = impl.armed_watches();
  constexpr int kReTakes = 300;
  for (int i = 0; i < kReTakes; ++i) {
    Lease l = m1.acquire();
    ASSERT_TRUE(l.token() > last) << "re-take " << i;
    last = l.token();
    l.release();
  }
  const auto after = impl.armed_watches();
  std::printf("[ retain   ] watch callbacks armed: %zu after the first release, %zu after %d re-takes\n", armed, after,
              kReTakes);
  EXPECT_LE(after, armed) << "re-takes must not add watch callbacks";
  EXPECT_LE(after, 2u);
  const auto t0 = std::chrono::steady_clock::now();
  auto b = m2.try_acquire_for(10s);
  ASSERT_TRUE(b);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s) << "granted on the watch, not after the 60 s retain time";
  EXPECT_TRUE(b->token() > last);
  EXPECT_TRUE(eventually([&] { return impl.armed_watches() == 0; }, 5s))
      << impl.armed_watches() << " callbacks left after the watch fired and the node went";
}

// A released lease speaks only for its own grant, even after a re-take of
// the same node: not valid, and its token is the one it was granted with.
TEST(Retain, AnEarlierLeaseStaysReleasedAfterAReTake) {
  Client c(shared_opts());
  FairMutex m(c, unique_lock_path("retain-old"), {.retain = 5s});
  Lease a = m.acquire();
  const auto ta = a.token();
  a.release();
  Lease b = m.acquire();
  EXPECT_TRUE(b.valid());
  EXPECT_FALSE(a.valid());
  EXPECT_EQ(a.token(), ta);
  EXPECT_TRUE(b.token() > ta);
  a.release();  // a no-op: must not release b
  EXPECT_TRUE(b.valid());
  EXPECT_FALSE(a.loss_reason());
}

// A waiter arriving while the node is retained idle: the children watch
// ends the retention at once (one notification, then the release multi).
TEST(Retain, AWaiterArrivingWhileRetainedIsGrantedWithoutWaitingForTheRetainTime) {
  Client c1(shared_opts()), c2(shared_opts());
  const auto path = unique_lock_path("retain-waiter");
  FairMutex m1(c1, path, {.retain = 60s});
  FairMutex m2(c2, path);
  Lease a = m1.acquire();
  const auto ta = a.token();
  a.release();
  ASSERT_EQ(c2.children(path).size(), 1u);
  const auto t0 = std::chrono::steady_clock::now();
  auto b = m2.try_acquire_for(10s);
  const auto waited = std::chrono::steady_clock::now() - t0;
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->token() > ta);
  std::printf("[ retain   ] waiter granted %.1f ms after queueing behind an idle retained node\n",
              std::chrono::duration<double, std::milli>(waited).count());
  EXPECT_LT(waited, 2s);  // not the 60 s retain time
  // The retention is over: the first owner now queues behind the holder.
  auto again = std::async(std::launch::async, [&] { return m1.acquire(); });
  EXPECT_EQ(again.wait_for(300ms), std::future_status::timeout);
  const auto tb = b->token();
  b->release();
  Lease c = again.get();
  EXPECT_TRUE(c.token() > tb);
}

// A waiter that queues between our release and our re-take: either the
// children watch ends the retention first, or the re-take's listing sees
// the waiter and voids itself. Either way we are granted only after it.
TEST(Retain, AWaiterQueuedBeforeTheReTakeGoesFirst) {
  Client c1(shared_opts()), c2(shared_opts());
  const auto path = unique_lock_path("retain-void");
  FairMutex m1(c1, path, {.retain = 60s});
  FairMutex m2(c2, path);
  for (int round = 0; round < 10; ++round) {
    Lease a = m1.acquire();
    a.release();
    auto waiter = std::make_shared<std::promise<AcquireResult>>();
    auto waited = waiter->get_future();
    // An owner of its own: the default one is this thread's, which m1's
    // acquire above used too, and the check below would find m1's node.
    m2.acquire_async([waiter](AcquireResult r) { waiter->set_value(std::move(r)); }, {.owner = "waiter"});
    // The waiter's node is in place before we ask again.
    ASSERT_TRUE(eventually(
        [&] {
          for (const auto& n : c1.children(path)) {
            auto p = parse_lock_node_name(n);
            if (p && p->owner_key == owner_key("waiter")) return true;
          }
          return false;
        },
        5s));
    auto mine = std::async(std::launch::async, [&] { return m1.acquire(); });
    ASSERT_EQ(waited.wait_for(30s), std::future_status::ready) << "round " << round << ": the waiter was never granted";
    auto w = waited.get();
    ASSERT_FALSE(w.error) << w.error->what();
    EXPECT_EQ(mine.wait_for(100ms), std::future_status::timeout) << "round " << round << ": granted ahead of a waiter";
    const auto tw = w.lease.token();
    w.lease.release();
    Lease b = mine.get();
    EXPECT_TRUE(b.token() > tw);
  }
}

// Whether `session` holds a watch on `path`, from the server's `wchp` (each
// watched path, then its sessions on tab-indented lines). 3.8 lists data
// (exists/get) watches only.
bool watched_by(const test::ZkServer& s, const std::string& path, std::int64_t session) {
  auto text = test::four_letter_word("127.0.0.1", s.port(), "wchp");
  if (!text) return false;
  char id[32];
  std::snprintf(id, sizeof id, "0x%llx", static_cast<unsigned long long>(session));
  std::istringstream in(*text);
  bool under = false;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '\t') under = line == path;
    else if (under && line.find(id) != std::string::npos) return true;
  }
  return false;
}

// Children watches on the server: mntr's zk_watch_count (data and children
// watches) less the data watches that `wchp` lists.
std::int64_t children_watches(test::ZkServer& s) {
  const auto all = s.mntr().counter("zk_watch_count").value_or(-1);
  auto text = test::four_letter_word("127.0.0.1", s.port(), "wchp");
  std::int64_t data = 0;
  std::istringstream in(text.value_or(""));
  for (std::string line; std::getline(in, line);) data += !line.empty() && line[0] == '\t';
  return all - data;
}

// A retaining mutex whose client's last acquisition of the lock found others
// queued lists without a children watch: a waiter's watch would only bring a notification at the
// next change, to every waiter. It retains again once an acquisition finds
// the lock free (which costs one acquisition without retention).
TEST(Retain, AfterContentionAWaitingRetainerArmsNoChildrenWatchAndRetainsAgainOnceFree) {
  test::ZkServer server;  // our own: wchp shows our sessions only
  server.start();
  Client holder(opts_for(server.connect_string())), c(opts_for(server.connect_string()));
  const auto path = unique_lock_path("retain-contended");
  FairMutex h(holder, path);
  FairMutex m(c, path, {.retain = 60s});
  for (int round = 0; round < 2; ++round) {  // no memory yet, then "contended"
    Lease held = h.acquire();
    auto waiting = std::async(std::launch::async, [&] { return m.acquire(); });
    // The waiter watches the holder's node once its listing is answered.
    ASSERT_TRUE(eventually([&] { return watched_by(server, held.node_path(), c.session_id()); }, 5s));
    EXPECT_EQ(children_watches(server), round == 0 ? 1 : 0) << "round " << round;
    held.release();
    Lease l = waiting.get();
    l.release();
    EXPECT_FALSE(c.try_stat(l.node_path())) << "round " << round << ": a lease granted behind others is released";
  }
  {
    Lease l = m.acquire();  // free, but listed without the watch: cannot retain
    l.release();
    EXPECT_FALSE(c.try_stat(l.node_path()));
  }
  Lease l = m.acquire();
  l.release();
  EXPECT_TRUE(c.try_stat(l.node_path())) << "retained again once an acquisition found the lock free";
}

// A callback registered on one grant of a retained node belongs to that
// lease only: lease a's callback must not run when a later re-take b of the
// same node is lost (issue 25), and b's runs once.
TEST(Retain, AnEarlierLeasesOnLostCallbackStaysQuietWhenAReTakeIsLost) {
  Client c(shared_opts()), admin(shared_opts());
  FairMutex m(c, unique_lock_path("retain-lost-cbs"), {.retain = 60s});
  std::atomic<int> a_calls{0}, b_calls{0};
  std::promise<LossReason> b_lost;
  Lease a = m.acquire();
  a.on_lost([&](LossReason, const std::string&) { ++a_calls; });
  a.release();
  Lease b = m.acquire();
  ASSERT_EQ(b.node_path(), a.node_path()) << "not a re-take";
  b.on_lost([&](LossReason r, const std::string&) {
    if (++b_calls == 1) b_lost.set_value(r);
  });
  ASSERT_NO_THROW(admin.remove(b.node_path()));
  auto f = b_lost.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready) << "the re-taken lease was not told";
  EXPECT_EQ(f.get(), LossReason::revoked);
  // One post runs every callback of a loss in order, so a's would have run
  // by now; and a's lease still reads as released.
  EXPECT_EQ(a_calls.load(), 0) << "a released lease's callback ran for a later grant";
  EXPECT_FALSE(a.loss_reason());
  b.release();
  EXPECT_EQ(b_calls.load(), 1);
  EXPECT_EQ(a_calls.load(), 0);
}

// The re-take tests acquire on other threads: one owner for all (the
// default owner is the thread's, and only the same owner re-takes).
const AcquireOptions kOwner{.owner = "retaker"};

// A re-take whose setData the proxy holds: the request's timeout still
// ends it (issue 25; it waited for the answer, up to 2/3 of the session
// timeout). The grant that comes once the hold lets go is released, not
// leaked: another client is granted the lock.
TEST(Retain, AReTakeReturnsWithinItsTimeoutAndAGrantAfterItIsNotLeaked) {
  test::FaultProxy proxy(test::shared_server().port());
  Client c({.connect = proxy.connect_string(), .session_timeout = 6s});
  Client other(shared_opts());
  const auto path = unique_lock_path("retain-retake-timeout");
  FairMutex m(c, path, {.retain = 60s});
  Lease a = m.acquire(kOwner);
  const auto node = a.node_path();
  a.release();
  ASSERT_TRUE(other.try_stat(node));
  proxy.hold_on_request(node, 5);  // the re-take's setData
  const auto t0 = Clock::now();
  auto r = std::async(std::launch::async, [&] { return m.try_acquire_for(200ms, kOwner); });
  const bool returned = r.wait_for(3s) == std::future_status::ready;
  const auto took = ms_since(t0);
  EXPECT_EQ(proxy.request_holds(), 1u) << "the re-take's setData was not held";
  proxy.release_held();
  ASSERT_TRUE(returned) << "try_acquire_for(200ms) of a re-take still waiting after 3 s";
  std::printf("[ retain   ] a held re-take's try_acquire_for(200ms) returned after %.0f ms\n", took);
  EXPECT_FALSE(r.get()) << "granted while its setData was held";
  EXPECT_LT(took, 1500.0);
  // The held setData now runs: the re-take grants with no caller, and is
  // released as a lease would be (retained, then ended by this waiter).
  auto o = FairMutex(other, path).try_acquire_for(5s);
  ASSERT_TRUE(o) << "the lock leaked to a grant nobody holds";
  const auto to = o->token();
  o->release();
  Lease b = m.acquire(kOwner);
  EXPECT_TRUE(b.token() > to);
}

// The same held re-take, cancelled by its stop_token.
TEST(Retain, AReTakeIsCancelledByItsStopToken) {
  test::FaultProxy proxy(test::shared_server().port());
  Client c({.connect = proxy.connect_string(), .session_timeout = 6s});
  const auto path = unique_lock_path("retain-retake-stop");
  FairMutex m(c, path, {.retain = 60s});
  Lease a = m.acquire(kOwner);
  const auto node = a.node_path();
  a.release();
  proxy.hold_on_request(node, 5);
  std::stop_source stop;
  auto r = std::async(std::launch::async, [&] { return m.acquire(stop.get_token(), kOwner); });
  ASSERT_TRUE(eventually([&] { return proxy.request_holds() == 1; }, 5s));
  const auto t0 = Clock::now();
  stop.request_stop();
  const bool returned = r.wait_for(3s) == std::future_status::ready;
  const auto took = ms_since(t0);
  proxy.release_held();
  ASSERT_TRUE(returned) << "a stop request did not end the re-take within 3 s";
  std::printf("[ retain   ] a held re-take returned %.0f ms after its stop request\n", took);
  try {
    r.get();
    ADD_FAILURE() << "granted after its stop request";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::cancelled) << e.what();
  }
  EXPECT_LT(took, 1000.0);
}

// A re-take that turns out void (a waiter queued while its setData was
// held) falls back to a normal acquisition with the time left, not the
// whole timeout again.
TEST(Retain, AVoidReTakesFallbackGetsOnlyTheTimeLeft) {
  test::FaultProxy proxy(test::shared_server().port());
  Client c({.connect = proxy.connect_string(), .session_timeout = 6s});
  Client other(shared_opts());
  const auto path = unique_lock_path("retain-retake-left");
  FairMutex m(c, path, {.retain = 60s});
  FairMutex mo(other, path);
  Lease a = m.acquire(kOwner);
  const auto node = a.node_path();
  a.release();
  proxy.hold_on_request(node, 5);
  constexpr auto kTimeout = 1500ms;
  const auto t0 = Clock::now();
  auto r = std::async(std::launch::async, [&] { return m.try_acquire_for(kTimeout, kOwner); });
  ASSERT_TRUE(eventually([&] { return proxy.request_holds() == 1; }, 5s));
  auto w = std::make_shared<std::promise<AcquireResult>>();
  auto wf = w->get_future();
  mo.acquire_async([w](AcquireResult res) { w->set_value(std::move(res)); });
  ASSERT_TRUE(eventually([&] { return other.children(path).size() == 2; }, 5s));
  std::this_thread::sleep_until(t0 + 1000ms);  // two thirds of the timeout spent on the re-take
  proxy.release_held();
  ASSERT_EQ(wf.wait_for(10s), std::future_status::ready) << "the waiter was never granted";
  auto held = wf.get();
  ASSERT_FALSE(held.error) << held.error->what();
  ASSERT_EQ(r.wait_for(10s), std::future_status::ready);
  const auto took = ms_since(t0);
  std::printf("[ retain   ] try_acquire_for(%lld ms) with a void re-take returned after %.0f ms\n",
              static_cast<long long>(kTimeout.count()), took);
  EXPECT_FALSE(r.get()) << "granted while the waiter holds the lock";
  EXPECT_GE(took, 1400.0);
  EXPECT_LT(took, 2300.0) << "the fallback restarted the whole timeout";
  held.lease.release();
}

// An owner that queues for another lock first releases its idle retained
// nodes (issue 25): an idle node must not stand in a queue for an owner
// that waits (docs/detector.md, "Idle retained nodes").
TEST(Retain, AnOwnerQueueingForAnotherLockReleasesItsIdleNodeFirst) {
  Client c(shared_opts()), other(shared_opts());
  const auto pa = unique_lock_path("retain-owner-a"), pb = unique_lock_path("retain-owner-b");
  FairMutex ma(c, pa, {.retain = 60s}), mb(c, pb, {.retain = 60s});
  Lease held = FairMutex(other, pb).acquire();
  Lease a = ma.acquire({.owner = "x"});
  const auto node = a.node_path();
  a.release();
  ASSERT_TRUE(other.try_stat(node)) << "not retained";
  auto w = std::make_shared<std::promise<AcquireResult>>();
  auto wf = w->get_future();
  mb.acquire_async([w](AcquireResult res) { w->set_value(std::move(res)); }, {.owner = "x"});
  ASSERT_TRUE(eventually([&] { return other.children(pb).size() == 2; }, 5s));
  EXPECT_TRUE(eventually([&] { return !other.try_stat(node); }, 5s))
      << "the idle node stayed while its owner waits for another lock";
  EXPECT_EQ(wf.wait_for(0ms), std::future_status::timeout);
  // Nor does it retain while that wait lasts: a release deletes.
  Lease again = ma.acquire({.owner = "x"});
  EXPECT_NE(again.node_path(), node);
  again.release();
  // (release() returns once the lease is over; the node's delete follows.)
  EXPECT_TRUE(eventually([&] { return !other.try_stat(again.node_path()); }, 5s))
      << "retained while its owner waits elsewhere";
  held.release();
  ASSERT_EQ(wf.wait_for(10s), std::future_status::ready);
  auto b = wf.get();
  ASSERT_FALSE(b.error) << b.error->what();
  b.lease.release();
  // With no wait under way, the owner retains again.
  Lease third = ma.acquire({.owner = "x"});
  third.release();
  EXPECT_TRUE(other.try_stat(third.node_path()));
}

// Our idle node deleted by someone else (an operator, a revocation): the
// retention ends quietly and the next acquire is a normal one.
TEST(Retain, AnIdleNodeDeletedByAnotherClientFallsBackToANormalAcquire) {
  Client c(shared_opts()), admin(shared_opts());
  const auto path = unique_lock_path("retain-revoked");
  FairMutex m(c, path, {.retain = 60s});
  Lease a = m.acquire();
  const auto node = a.node_path();
  const auto ta = a.token();
  a.release();
  ASSERT_NO_THROW(admin.remove(node));
  Lease b = m.acquire();
  EXPECT_NE(b.node_path(), node);
  EXPECT_TRUE(b.valid());
  EXPECT_TRUE(b.token() > ta);
}

// A holder that re-took its retained node is revoked: the record names the
// token of the re-take (the setData's zxid), not the node's creation, and
// the lease hears of it.
TEST(Retain, ARevokedReTakenHolderIsRecordedWithItsReTakeToken) {
  Client c(shared_opts()), admin(shared_opts());
  const auto path = unique_lock_path("retain-revoke-token");
  FairMutex m(c, path, {.retain = 60s});
  Lease a = m.acquire();
  const auto ta = a.token();
  a.release();
  Lease b = m.acquire();
  ASSERT_EQ(b.node_path(), a.node_path()) << "not a re-take";
  ASSERT_TRUE(b.token() > ta);
  std::promise<LossReason> lost;
  b.on_lost([&lost](LossReason r, const std::string&) { lost.set_value(r); });

  RevocationRequest req;
  req.victims.push_back({b.node_path(), c.default_owner(), 0});
  req.record.policy = "operator";
  req.record.mode = "wait";
  req.record.reason = "test";
  const auto r = revoke(admin, req);
  ASSERT_EQ(r.outcome, RevokeOutcome::revoked) << r.detail;
  const auto rec = read_revocation_record(admin, b.node_path());
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->victim_token, b.token().str());
  auto f = lost.get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready) << "the re-taken lease was not told";
  EXPECT_EQ(f.get(), LossReason::revoked);
}

// The session ends while the node is retained idle: nothing is reported
// (no lease exists), the node goes with the session, and another client is
// granted.
TEST(Retain, ClosingTheSessionWhileRetainedFreesTheLock) {
  const auto path = unique_lock_path("retain-close");
  Client c2(shared_opts());
  {
    Client c1(shared_opts());
    FairMutex m1(c1, path, {.retain = 60s});
    Lease a = m1.acquire();
    a.release();
    ASSERT_EQ(c2.children(path).size(), 1u);
  }  // the mutex, then the client: the retention ends, the session closes
  FairMutex m2(c2, path);
  auto b = m2.try_acquire_for(5s);
  ASSERT_TRUE(b);
  EXPECT_TRUE(b->valid());
}

// The server expires the session while the node is retained idle: the
// client is cut off (a blackhole, so it cannot see the waiter queue and
// release) for longer than its timeout. The waiter is granted once the
// server expires the session, nothing is reported to the released lease,
// and when the link is back the retaining mutex's next acquire is a normal
// one on the new session, with a larger token than the waiter's.
TEST(Retain, ServerSideExpiryWhileRetainedFreesTheLockQuietly) {
  test::FaultProxy proxy(test::shared_server().port());
  Client c1({.connect = proxy.connect_string(), .session_timeout = 2s});
  Client c2(shared_opts());
  std::atomic<bool> c1_lost{false};
  c1.add_listener([&](ConnectionState s) {
    if (s == ConnectionState::lost) c1_lost = true;
  });
  const auto path = unique_lock_path("retain-expiry");
  FairMutex m1(c1, path, {.retain = 60s});
  FairMutex m2(c2, path);
  std::atomic<int> reported{0};
  Lease a = m1.acquire();
  a.on_lost([&](LossReason, const std::string&) { ++reported; });
  const auto node = a.node_path();
  const auto ta = a.token();
  a.release();
  ASSERT_TRUE(c2.try_stat(node)) << "the released node is retained";

  proxy.blackhole(true);
  const auto cut = Clock::now();
  auto b = m2.try_acquire_for(30s);
  ASSERT_TRUE(b) << "the waiter was not granted after the retaining session's expiry";
  const auto waited = ms_since(cut);
  EXPECT_TRUE(b->valid());
  EXPECT_TRUE(b->token() > ta);
  EXPECT_FALSE(c2.try_stat(node)) << "the retained node went with the session";
  EXPECT_GE(waited, 1000.0) << "granted before the server could have expired a 2 s session";

  proxy.blackhole(false);
  ASSERT_TRUE(eventually([&] { return c1_lost.load() && c1.session_epoch() == 2 && c1.connected(); }, 30s))
      << "the cut-off client never learned of its expiry and reconnected";
  const auto tb = b->token();
  b->release();
  auto a2 = m1.try_acquire_for(10s);
  ASSERT_TRUE(a2);
  EXPECT_NE(a2->node_path(), node);
  EXPECT_TRUE(a2->token() > tb);
  EXPECT_EQ(reported.load(), 0) << "a released lease heard of the expiry";
}

// Another owner through the same mutex queues normally and ends the
// retention; readers of a FairSharedMutex never retain.
TEST(Retain, AnotherOwnerEndsTheRetentionAndReadersDoNotRetain) {
  Client c(shared_opts());
  const auto path = unique_lock_path("retain-owners");
  FairSharedMutex m(c, path, {.retain = 60s});
  Lease a = m.acquire({.owner = "alice"});
  const auto node = a.node_path();
  a.release();
  EXPECT_TRUE(c.try_stat(node));
  Lease b = m.acquire({.owner = "bob"});
  EXPECT_NE(b.node_path(), node);
  EXPECT_FALSE(c.try_stat(node));
  b.release();
  Lease r = m.acquire_shared({.owner = "carol"});
  const auto rnode = r.node_path();
  r.release();
  EXPECT_FALSE(c.try_stat(rnode)) << "a reader's release deletes its node";
}

}  // namespace
}  // namespace zklock
