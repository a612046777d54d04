// Retained leases against a real ZooKeeper: a re-take is local (counted by
// the server: no request, no write beyond the session's heartbeats), gives
// each lease its own token (the node's czxid, the next lease ordinal: more in
// retain_token_test.cpp), keeps one children watch, and keeps a waiter no
// longer than the fairness bound of docs/design.md ("Retained leases"): one
// notification plus one release behind an idle retainer, the hold in
// progress behind a busy one. Losses while retained: retain_loss_test.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <future>
#include <thread>

#include "client_impl.hpp"  // armed_watches, heartbeat_writes (lib/src)
#include "zk_harness.hpp"
#include "zklock/fair_mutex.hpp"
#include "zklock/protocol/node_name.hpp"
#include "zklock/shared_mutex.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;
using test::eventually;
using test::ms_since;
using test::unique_lock_path;

ClientOptions opts_for(const std::string& connect) { return {.connect = connect, .session_timeout = 4s}; }
ClientOptions shared_opts() { return opts_for(test::shared_server().connect_string()); }

std::int64_t server_zxid(const test::ZkServer& s) { return test::last_zxid("127.0.0.1", s.port()); }

std::int64_t requests(test::ZkServer& s) { return s.mntr().counter("zk_packets_received").value_or(0); }

// Acquisitions on other threads share one owner (the default owner is the
// thread's, and only the same owner re-takes).
const AcquireOptions kOwner{.owner = "retaker"};

// One session re-taking one lock 10,000 times on a server of its own: the
// server receives nothing but the session's own upkeep (its heartbeat
// writes, at most one per period, and pings), writes nothing else, and
// every re-take returns the retained node with the node's next lease ordinal.
TEST(Retain, TenThousandReTakesSendNoRequestAndEachHasItsOwnToken) {
  test::ZkServer server;
  server.start();
  Client c(opts_for(server.connect_string()));
  auto& impl = *detail::ClientAccess::impl(c);
  const auto path = unique_lock_path("retain-cost");
  FairMutex m(c, path, {.retain = 60s});
  Lease first = m.acquire();
  const auto node = first.node_path();
  const FencingToken token = first.token();
  first.release();
  ASSERT_TRUE(c.try_stat(node)) << "a release with nobody waiting keeps the node";

  constexpr int kReTakes = 10000;
  int other_node = 0, other_token = 0, invalid = 0;
  FencingToken last = token;
  const auto hb0 = impl.heartbeat_writes();
  const auto r0 = requests(server);
  const auto z0 = server_zxid(server);
  const auto t0 = Clock::now();
  for (int i = 0; i < kReTakes; ++i) {
    Lease l = m.acquire();
    other_node += l.node_path() != node;
    other_token += !(l.token() > last && l.token().czxid() == token.czxid());  // the node's next lease
    last = l.token();
    invalid += !l.valid();
    l.release();
  }
  const auto took = Clock::now() - t0;
  const auto z1 = server_zxid(server);
  const auto r1 = requests(server);
  const auto hb = static_cast<std::int64_t>(impl.heartbeat_writes() - hb0);
  const auto sent = r1 - r0 - 2;  // less our own srvr and mntr (each counts one)
  // The C client pings a connection idle for a third of the session timeout.
  const auto pings = std::chrono::duration_cast<std::chrono::milliseconds>(took).count() / (4000 / 3) + 1;
  const double us = std::chrono::duration<double, std::micro>(took).count() / kReTakes;
  std::printf("[ retain   ] %d re-takes in %.1f ms (%.2f us each): %lld requests and %lld writes at the server, "
              "%lld of them heartbeats\n",
              kReTakes, us * kReTakes / 1000.0, us, static_cast<long long>(sent), static_cast<long long>(z1 - z0),
              static_cast<long long>(hb));
  EXPECT_EQ(other_node, 0);
  EXPECT_EQ(other_token, 0) << "a local re-take carries the node's czxid and a later lease ordinal";
  EXPECT_EQ(invalid, 0);
  EXPECT_LE(z1 - z0, hb) << "a write beyond the heartbeats";
  EXPECT_LE(sent, hb + pings) << "a request beyond the session's upkeep";
  EXPECT_TRUE(c.try_stat(node)) << "the node is still retained";
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
    ASSERT_TRUE(l.token() > last) << "re-take " << i << ": " << l.token().str() << " after " << last.str();
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
// the same node: not valid, and the re-take does not release it twice.
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
  EXPECT_TRUE(b.token() > ta) << "a local re-take is a new lease: " << b.token().str() << " after " << ta.str();
  EXPECT_EQ(b.token().czxid(), ta.czxid()) << "the same node";
  a.release();  // a no-op: must not release b
  EXPECT_TRUE(b.valid());
  EXPECT_FALSE(a.loss_reason());
}

// A request whose stop token is already signalled gets no lease from the
// retained node: the re-take is void (the machine's decision, from the
// event's `cancelled`), the node is released for real, and the request fails
// as cancelled. The next request acquires normally.
TEST(Retain, AnAlreadyCancelledRequestIsNotReTaken) {
  Client c(shared_opts());
  const auto path = unique_lock_path("retain-cancelled");
  FairMutex m(c, path, {.retain = 60s});
  Lease a = m.acquire(kOwner);
  const auto node = a.node_path();
  a.release();
  ASSERT_TRUE(c.try_stat(node)) << "retained idle";
  std::stop_source stop;
  stop.request_stop();
  try {
    Lease b = m.acquire(stop.get_token(), kOwner);
    ADD_FAILURE() << "a cancelled request was granted " << b.node_path();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::cancelled) << e.what();
  }
  EXPECT_TRUE(eventually([&] { return !c.try_stat(node); }, 5s)) << "the void re-take releases the node";
  Lease d = m.acquire(kOwner);
  EXPECT_NE(d.node_path(), node);
  EXPECT_TRUE(d.valid());
}

// A waiter arriving while the node is retained idle: the children watch
// ends the retention at once (one notification, then the release multi),
// and the retainer's next acquire queues behind the waiter.
TEST(Retain, AWaiterBehindAnIdleRetainerIsGrantedAfterOneNotificationAndOneRelease) {
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

// A waiter arriving while the retainer holds a re-take: granted right
// after that hold ends (the release is real: the watch reported the
// waiter), and the retainer's next acquire queues behind it.
TEST(Retain, AWaiterBehindABusyRetainerIsGrantedRightAfterTheHoldInProgress) {
  Client c1(shared_opts()), c2(shared_opts());
  const auto path = unique_lock_path("retain-busy");
  FairMutex m1(c1, path, {.retain = 60s});
  FairMutex m2(c2, path);
  Lease a = m1.acquire(kOwner);
  const auto ta = a.token();
  a.release();
  Lease held = m1.acquire(kOwner);
  ASSERT_EQ(held.node_path(), a.node_path()) << "not a re-take";
  auto w = std::make_shared<std::promise<AcquireResult>>();
  auto wf = w->get_future();
  m2.acquire_async([w](AcquireResult r) { w->set_value(std::move(r)); });
  ASSERT_TRUE(eventually([&] { return c2.children(path).size() == 2; }, 5s));
  EXPECT_EQ(wf.wait_for(300ms), std::future_status::timeout) << "granted while the re-take is held";
  const auto released = Clock::now();
  held.release();
  ASSERT_EQ(wf.wait_for(10s), std::future_status::ready) << "the waiter was never granted";
  const auto after = ms_since(released);
  auto got = wf.get();
  ASSERT_FALSE(got.error) << got.error->what();
  std::printf("[ retain   ] waiter behind a busy retainer granted %.1f ms after its release\n", after);
  EXPECT_LT(after, 2000.0) << "not right after the hold in progress";
  EXPECT_TRUE(got.lease.token() > ta);
  auto again = std::async(std::launch::async, [&] { return m1.acquire(kOwner); });
  EXPECT_EQ(again.wait_for(300ms), std::future_status::timeout) << "re-taken after the watch reported the waiter";
  const auto tw = got.lease.token();
  got.lease.release();
  Lease b = again.get();
  EXPECT_TRUE(b.token() > tw);
}

// A retainer re-taking in a tight loop while a waiter queues: it may
// re-take until its watch reports the waiter, never after. The waiter is
// granted promptly (not after the 60 s retain time), tokens never
// decrease, and every grant after the waiter's has a larger token.
TEST(Retain, ARetainerReTakingInATightLoopDoesNotStarveAWaiter) {
  Client c1(shared_opts()), c2(shared_opts());
  const auto path = unique_lock_path("retain-loop");
  FairMutex m1(c1, path, {.retain = 60s});
  FairMutex m2(c2, path);
  for (int round = 0; round < 5; ++round) {
    std::atomic<bool> stop{false};
    std::mutex mu;
    std::vector<FencingToken> tokens;  // GUARDED_BY(mu): the loop's grants, in order
    auto loop = std::async(std::launch::async, [&] {
      while (!stop) {
        Lease l = m1.acquire(kOwner);
        {
          std::lock_guard lk(mu);
          tokens.push_back(l.token());
        }
        l.release();
      }
    });
    ASSERT_TRUE(eventually([&] { std::lock_guard lk(mu); return tokens.size() >= 20; }, 10s));
    const auto t0 = Clock::now();
    auto w = m2.try_acquire_for(10s);
    ASSERT_TRUE(w) << "round " << round << ": the waiter was starved";
    const auto waited = ms_since(t0);
    const auto tw = w->token();
    std::this_thread::sleep_for(20ms);  // hold a little: the loop now queues behind
    w->release();
    ASSERT_TRUE(eventually([&] { std::lock_guard lk(mu); return tokens.back() > tw; }, 10s))
        << "round " << round << ": the retainer never got the lock back";
    stop = true;
    loop.get();
    std::lock_guard lk(mu);
    std::size_t before = 0;
    while (before < tokens.size() && tokens[before] < tw) ++before;
    // Increasing: each re-take of a node is a lease of its own (the round's
    // first grant may be a node not retained, after the contention before).
    for (std::size_t i = 1; i < before; ++i)
      EXPECT_TRUE(tokens[i] > tokens[i - 1]) << "round " << round << ": " << tokens[i].str() << " after "
                                             << tokens[i - 1].str();
    for (std::size_t i = before; i < tokens.size(); ++i)
      EXPECT_TRUE(tokens[i] > tw) << "round " << round << ": " << tokens[i].str() << " after the waiter's " << tw.str();
    std::printf("[ retain   ] round %d: waiter granted after %.1f ms beside %zu re-takes\n", round, waited, before);
    EXPECT_LT(waited, 2000.0) << "round " << round;
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

// An owner that queues for another lock first releases its idle retained
// nodes: an idle node must not stand in a queue for an owner
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
