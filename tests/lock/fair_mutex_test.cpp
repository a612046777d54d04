// FairMutex against a real ZooKeeper, what only FairMutex does: the grant's
// node and marker, hand-off, re-entry, tokens across a re-created parent,
// waiters revoked, async scale. FIFO, timeouts, cancellation and revocation
// are the lock contract suite's (contract_test.cpp).
#include "zklock/fair_mutex.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <future>
#include <mutex>
#include <thread>

#include "zk_harness.hpp"
#include "zklock/protocol/node_data.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test::unique_lock_path;

ClientOptions shared_opts() { return {.connect = test::shared_server().connect_string(), .session_timeout = 4s}; }

using test::eventually;

TEST(FairMutex, UncontendedAcquireAndRelease) {
  Client c(shared_opts());
  const auto path = unique_lock_path("uncontended");
  FairMutex m(c, path);
  FencingToken first;
  {
    Lease l = m.acquire();
    ASSERT_TRUE(l);
    EXPECT_TRUE(l.valid());
    EXPECT_FALSE(l.suspended());
    EXPECT_EQ(l.lock_path(), path);
    EXPECT_EQ(l.token().ensemble_id(), c.ensemble_id());
    const auto name = split_path(l.node_path()).second;
    auto parsed = protocol::parse_lock_node_name(name);
    ASSERT_TRUE(parsed);
    EXPECT_EQ(parsed->mode, Mode::exclusive);
    EXPECT_EQ(parsed->owner_key, protocol::owner_key(l.owner()));
    auto data = c.try_get(l.node_path());
    ASSERT_TRUE(data);
    auto nd = protocol::decode_node_data(*data);
    ASSERT_TRUE(nd);
    EXPECT_EQ(nd->owner, l.owner());
    first = l.token();
    l.release();
    l.release();  // idempotent
    EXPECT_FALSE(l.valid());
    EXPECT_TRUE(c.children(path).empty());
    EXPECT_EQ(c.try_get(path).value_or(""), name);  // the hand-off marker
  }
  Lease again = m.acquire();
  EXPECT_TRUE(again.token() > first);
}

// The node's data is memoized per thread (lock_attempt.cpp): acquisitions
// from one thread that differ in owner, priority or description each write
// their own, and a repeat writes the same bytes again.
TEST(FairMutex, EachAcquisitionWritesItsOwnNodeData) {
  Client c(shared_opts());
  FairMutex m(c, unique_lock_path("node-data"));
  const auto data_of = [&](const AcquireOptions& o) {
    Lease l = m.acquire(o);
    auto bytes = c.try_get(l.node_path());
    EXPECT_TRUE(bytes);
    auto nd = protocol::decode_node_data(bytes.value_or(""));
    EXPECT_TRUE(nd);
    return std::pair{bytes.value_or(""), nd.value_or(protocol::NodeData{})};
  };
  const auto [a, da] = data_of({.owner = "svc-a", .description = "first"});
  const auto [b, db] = data_of({.owner = "svc-b", .description = "first"});
  const auto [p, dp] = data_of({.owner = "svc-b", .priority = 7, .description = "first"});
  const auto [d, dd] = data_of({.owner = "svc-b", .priority = 7, .description = "second"});
  const auto [again, dagain] = data_of({.owner = "svc-a", .description = "first"});
  EXPECT_EQ(da.owner, "svc-a");
  EXPECT_EQ(db.owner, "svc-b");
  EXPECT_EQ(dp.priority, 7);
  EXPECT_EQ(db.priority, 0);
  EXPECT_EQ(dd.description, "second");
  EXPECT_EQ(dp.description, "first");
  EXPECT_EQ(again, a);
  EXPECT_EQ(a, protocol::encode_node_data(da));
}

// release_async() returns without waiting for the server; its callback runs
// once, on the callback thread, when the node is gone and the next waiter
// can be granted through the marker.
TEST(FairMutex, ReleaseAsyncReturnsAtOnceAndHandsOn) {
  Client c(shared_opts());
  const auto path = unique_lock_path("release-async");
  FairMutex m(c, path);
  Lease l = m.acquire({.owner = "holder"});
  const auto name = split_path(l.node_path()).second;
  std::promise<AcquireResult> waiter;
  m.acquire_async([&](AcquireResult r) { waiter.set_value(std::move(r)); }, {.owner = "waiter"});
  ASSERT_TRUE(eventually([&] { return c.children(path).size() == 2; }));
  std::promise<std::thread::id> done;
  l.release_async([&] { done.set_value(std::this_thread::get_id()); });
  auto df = done.get_future();
  ASSERT_EQ(df.wait_for(5s), std::future_status::ready) << "release_async's callback never ran";
  EXPECT_NE(df.get(), std::this_thread::get_id()) << "the callback runs on the client's callback thread";
  EXPECT_FALSE(l.valid());
  auto wf = waiter.get_future();
  ASSERT_EQ(wf.wait_for(5s), std::future_status::ready);
  auto wr = wf.get();
  ASSERT_FALSE(wr.error) << wr.error->what();
  EXPECT_TRUE(wr.lease.token() > l.token());
  EXPECT_EQ(c.try_get(path).value_or(""), name) << "the hand-off marker names the released node";
  EXPECT_EQ(c.children(path).size(), 1u);

  // Already released, and a lease that holds nothing: the callback still runs once.
  std::promise<void> again, empty;
  l.release_async([&] { again.set_value(); });
  Lease().release_async([&] { empty.set_value(); });
  EXPECT_EQ(again.get_future().wait_for(5s), std::future_status::ready);
  EXPECT_EQ(empty.get_future().wait_for(5s), std::future_status::ready);
  wr.lease.release_async();  // no callback: allowed
  EXPECT_TRUE(eventually([&] { return c.children(path).empty(); }));
}

// Acquire and release chained entirely in callbacks: no thread blocks.
TEST(FairMutex, AsyncAcquireReleaseChainOnOneSession) {
  Client c(shared_opts());
  const auto path = unique_lock_path("async-chain");
  FairMutex m(c, path);
  constexpr int kRounds = 200;
  std::atomic<int> rounds{0}, errors{0};
  std::promise<void> finished;
  std::function<void()> next = [&] {
    m.acquire_async([&](AcquireResult r) {
      if (r.error) {
        ++errors;
        finished.set_value();
        return;
      }
      auto lease = std::make_shared<Lease>(std::move(r.lease));
      lease->release_async([&, lease] {
        if (++rounds == kRounds) finished.set_value();
        else next();
      });
    });
  };
  next();
  ASSERT_EQ(finished.get_future().wait_for(60s), std::future_status::ready) << rounds << " rounds done";
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(rounds.load(), kRounds);
  EXPECT_TRUE(c.children(path).empty());
}

// The hand-off without a read applies only when the vanished node was the
// only one ahead: a waiter behind an abandoned middle waiter keeps waiting
// for the holder, and a lone waiter is granted when the holder's node goes
// without a marker (revoked).
TEST(FairMutex, WaiterBehindAnAbandonedWaiterWaitsForTheHolder) {
  Client c(shared_opts());
  const auto path = unique_lock_path("abandoned-middle");
  FairMutex m(c, path);
  Lease holder = m.acquire({.owner = "holder"});
  std::stop_source give_up;
  std::promise<AcquireResult> middle, last;
  m.acquire_async([&](AcquireResult r) { middle.set_value(std::move(r)); }, {.owner = "middle"},
                  std::chrono::milliseconds::zero(), give_up.get_token());
  ASSERT_TRUE(eventually([&] { return c.children(path).size() == 2; }));
  m.acquire_async([&](AcquireResult r) { last.set_value(std::move(r)); }, {.owner = "last"});
  ASSERT_TRUE(eventually([&] { return c.children(path).size() == 3; }));
  give_up.request_stop();
  auto mf = middle.get_future();
  ASSERT_EQ(mf.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(mf.get().error->code(), Errc::cancelled);
  ASSERT_TRUE(eventually([&] { return c.children(path).size() == 2; }));
  auto lf = last.get_future();
  EXPECT_EQ(lf.wait_for(500ms), std::future_status::timeout) << "granted while the holder still holds";
  EXPECT_TRUE(holder.valid());
  holder.release();
  ASSERT_EQ(lf.wait_for(5s), std::future_status::ready);
  auto lr = lf.get();
  ASSERT_FALSE(lr.error) << lr.error->what();
  EXPECT_TRUE(lr.lease.token() > holder.token());
}

TEST(FairMutex, LoneWaiterIsGrantedWhenTheHolderIsRevoked) {
  Client c(shared_opts()), other(shared_opts());
  const auto path = unique_lock_path("revoked-head");
  FairMutex m(c, path), mo(other, path);
  Lease holder = m.acquire({.owner = "holder"});
  std::promise<AcquireResult> waiter;
  mo.acquire_async([&](AcquireResult r) { waiter.set_value(std::move(r)); }, {.owner = "waiter"});
  ASSERT_TRUE(eventually([&] { return c.children(path).size() == 2; }));
  other.remove_async(holder.node_path(), -1, [](Status) {});  // no marker: as the detector or an operator would
  auto wf = waiter.get_future();
  ASSERT_EQ(wf.wait_for(5s), std::future_status::ready);
  auto wr = wf.get();
  ASSERT_FALSE(wr.error) << wr.error->what();
  EXPECT_TRUE(wr.lease.valid());
  EXPECT_TRUE(eventually([&] { return holder.loss_reason() == LossReason::revoked; }));
}

// Once a client has found a lock free, an uncontended acquisition of it sends
// the create and the listing only — through any mutex object on that lock,
// even one made for the acquisition: the listing's children watch covers our
// node (the machine's invariant 6), and a deletion by someone else is still
// reported at once. Counted on a server of our own; the minimum over a few
// cycles leaves out a heartbeat that falls inside one.
TEST(FairMutex, AFreeLockCostsTheCreateAndTheListingAndADeletionIsStillReported) {
  test::ZkServer server;
  server.start();
  Client c({.connect = server.connect_string(), .session_timeout = 4s});
  const auto path = unique_lock_path("free-cost");
  FairMutex m(c, path);
  m.acquire().release();  // the client learns that the lock is free
  const auto requests = [&] { return server.mntr().counter("zk_packets_received").value_or(0); };
  std::int64_t fewest = 1000;
  for (int i = 0; i < 5; ++i) {
    FairMutex fresh(c, path);
    const auto r0 = requests();
    Lease l = fresh.acquire();
    fewest = std::min(fewest, requests() - r0 - 1);  // less our own mntr
  }
  EXPECT_EQ(fewest, 2) << "create and listing; an exists on our own node would make 3";
  Client admin({.connect = server.connect_string(), .session_timeout = 4s});
  Lease l = m.acquire();
  admin.remove(l.node_path());
  EXPECT_TRUE(eventually([&] { return l.loss_reason() == LossReason::revoked; }, 5s));
  EXPECT_FALSE(l.valid());
}

// A waiter that expected a free lock: its listing carried the children
// watch, showed the holder, and so armed the exists watch on its node.
// Deleting the waiting node (as the detector or an operator would) fails the
// wait at once, and the holder is untouched.
TEST(FairMutex, AWaiterThatExpectedAFreeLockStillLearnsItsNodeWasDeleted) {
  Client c(shared_opts()), other(shared_opts());
  const auto path = unique_lock_path("free-then-waiting");
  FairMutex m(c, path), mo(other, path);
  m.acquire().release();  // the client learns that the lock is free
  Lease holder = mo.acquire();
  // Shared: the callback may outlive this scope if an assertion returns early.
  auto waited = std::make_shared<std::promise<AcquireResult>>();
  m.acquire_async([waited](AcquireResult r) { waited->set_value(std::move(r)); });
  ASSERT_TRUE(eventually([&] { return c.children(path).size() == 2; }));
  for (const auto& n : c.children(path)) {
    if (path + "/" + n != holder.node_path()) other.remove(path + "/" + n);
  }
  auto f = waited->get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready) << "the waiter never learned its node was deleted";
  auto r = f.get();
  ASSERT_TRUE(r.error);
  EXPECT_EQ(r.error->code(), Errc::deadlock_victim) << r.error->what();
  EXPECT_TRUE(holder.valid());
}

TEST(FairMutex, SameOwnerTwiceWouldDeadlock) {
  Client c(shared_opts());
  FairMutex m(c, unique_lock_path("reentry"));
  Lease l = m.acquire({.owner = "job-1"});
  try {
    m.acquire({.owner = "job-1"});
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::would_deadlock);
    EXPECT_NE(std::string(e.what()).find("job-1"), std::string::npos);
  }
  l.release();
  Lease l2 = m.acquire({.owner = "job-1"});  // free again after release
  EXPECT_TRUE(l2.valid());
}

TEST(FairMutex, TokensIncreaseAcrossParentDeletionAndRecreation) {
  Client c(shared_opts());
  const auto path = unique_lock_path("recreate");
  FairMutex m(c, path);
  FencingToken before;
  {
    Lease l = m.acquire();
    before = l.token();
  }
  // Delete the (now empty) container parent, as the server's reaper would.
  ASSERT_NO_THROW(c.remove(path));
  Lease l = m.acquire();
  EXPECT_EQ(l.token().sequence(), 0);  // the suffix restarted...
  EXPECT_TRUE(l.token() > before);     // ...the czxid did not
}

TEST(FairMutex, WaiterWhoseNodeIsRevokedFailsAsDeadlockVictim) {
  Client c(shared_opts());
  Client other(shared_opts());
  const auto path = unique_lock_path("victim");
  FairMutex m(c, path);
  Lease holder = m.acquire({.owner = "holder"});
  auto waiter = std::async(std::launch::async, [&] { return m.acquire({.owner = "waiter"}); });
  std::string waiting_node;
  ASSERT_TRUE(eventually([&] {
    auto kids = c.children(path);
    for (auto& k : kids) {
      auto n = protocol::parse_lock_node_name(k);
      if (n && n->owner_key == protocol::owner_key("waiter")) waiting_node = path + "/" + k;
    }
    return !waiting_node.empty();
  }));
  other.remove_async(waiting_node, -1, [](Status) {});
  try {
    waiter.get();
    FAIL();
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::deadlock_victim);
  }
}

TEST(FairMutex, AsyncTenThousandWaitersOnOneSession) {
  Client c(shared_opts());
  const auto path = unique_lock_path("async");
  FairMutex m(c, path);
  constexpr int kWaiters = 10000;
  std::atomic<int> granted{0}, failed{0};
  std::atomic<int> inside{0}, overlaps{0};
  std::mutex mu;
  std::condition_variable cv;
  const auto start = Clock::now();
  for (int i = 0; i < kWaiters; ++i) {
    m.acquire_async(
        [&](AcquireResult r) {
          if (r.error) {
            ++failed;
          } else {
            if (inside.fetch_add(1) != 0) ++overlaps;
            inside.fetch_sub(1);
            r.lease.release();
            ++granted;
          }
          std::lock_guard lk(mu);
          cv.notify_all();
        },
        {.owner = "task-" + std::to_string(i)});
  }
  std::unique_lock lk(mu);
  ASSERT_TRUE(cv.wait_for(lk, 240s, [&] { return granted + failed == kWaiters; }))
      << granted << " granted, " << failed << " failed";
  EXPECT_EQ(failed.load(), 0);
  EXPECT_EQ(overlaps.load(), 0);
  std::printf("10000 async waiters on one session drained in %.2f s\n",
              std::chrono::duration<double>(Clock::now() - start).count());
  EXPECT_TRUE(c.children(path).empty());
}

}  // namespace
}  // namespace zklock
