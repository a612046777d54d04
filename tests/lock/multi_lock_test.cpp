// MultiLock and StripedMutex against a real server: order and merging,
// all-or-nothing, two processes with opposite orders (zklock_test_worker
// multi|naive), and two processes agreeing on the stripe of 10,000 keys
// (zklock_test_worker stripes). MultiLock is also in the lock contract suite
// (contract_test.cpp).
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <optional>
#include <stop_token>
#include <string>
#include <vector>

#include "lock_test_support.hpp"
#include "zk_harness.hpp"
#include "zklock/fair_mutex.hpp"
#include "zklock/multi_lock.hpp"
#include "zklock/protocol/node_name.hpp"
#include "zklock/shared_mutex.hpp"
#include "zklock/striped_mutex.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using lock_test::count_children;
using lock_test::ms_since;
using lock_test::shared_opts;
using test::eventually;
using test::unique_lock_path;

TEST(MultiLock, SortsMergesAndHoldsEachMemberInItsMode) {
  Client c(shared_opts());
  Client c2(shared_opts());
  const auto base = unique_lock_path("multi-order");
  MultiLock multi(c, {{base + "/c", Mode::shared},
                      {base + "/b", Mode::shared},
                      {base + "/a", Mode::exclusive},
                      {base + "/c", Mode::exclusive},
                      {base + "/b", Mode::shared}});
  ASSERT_EQ(multi.locks().size(), 3u);
  EXPECT_EQ(multi.locks()[0].path, base + "/a");
  EXPECT_EQ(multi.locks()[0].mode, Mode::exclusive);
  EXPECT_EQ(multi.locks()[1].path, base + "/b");
  EXPECT_EQ(multi.locks()[1].mode, Mode::shared);
  EXPECT_EQ(multi.locks()[2].path, base + "/c");
  EXPECT_EQ(multi.locks()[2].mode, Mode::exclusive);  // exclusive wins

  MultiLease held = multi.acquire();
  ASSERT_EQ(held.leases().size(), 3u);
  for (std::size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(held.leases()[i].lock_path(), multi.locks()[i].path);
    EXPECT_EQ(held.leases()[i].mode(), multi.locks()[i].mode);
  }
  EXPECT_TRUE(held.valid());
  EXPECT_EQ(held.token(base + "/b"), held.leases()[1].token());
  EXPECT_NE(held.token(base + "/a").czxid(), held.token(base + "/c").czxid());
  EXPECT_THROW(held.lease(base + "/d"), Error);

  // Another session can read b beside us, not a or c.
  FairSharedMutex b(c2, base + "/b"), a(c2, base + "/a");
  EXPECT_TRUE(b.try_acquire_shared_for(5s, {.owner = "reader"}).has_value());
  EXPECT_FALSE(a.try_acquire_shared_for(200ms, {.owner = "reader"}).has_value());

  held.release();
  EXPECT_FALSE(held.valid());
  for (const auto& l : multi.locks()) EXPECT_EQ(count_children(c, l.path), 0u) << l.path;
}

TEST(MultiLock, RejectsAnEmptySetAndBadPaths) {
  Client c(shared_opts());
  EXPECT_THROW(MultiLock(c, {}), Error);
  EXPECT_THROW(MultiLock(c, {{"/locks/a", Mode::exclusive}, {"relative", Mode::shared}}), Error);
}

// The deadline runs out after A is taken, while waiting for B: A is
// released, our waiting node under B is deleted, B's holder keeps B.
TEST(MultiLock, TimeoutAfterTakingALeavesNoNodeUnderAOrB) {
  Client c(shared_opts());
  Client other(shared_opts());
  const auto base = unique_lock_path("multi-timeout");
  const auto a = base + "/a", b = base + "/b";
  FairMutex b_lock(other, b);
  Lease b_holder = b_lock.acquire({.owner = "b-holder"});
  MultiLock multi(c, {{b, Mode::exclusive}, {a, Mode::exclusive}});
  const auto start = Clock::now();
  auto r = multi.try_acquire_for(400ms, {.owner = "both"});
  const auto took = ms_since(start);
  EXPECT_FALSE(r.has_value());
  EXPECT_GE(took, 390);
  EXPECT_LT(took, 3000);
  EXPECT_EQ(count_children(c, a), 0u);  // released before try_acquire_for returned
  EXPECT_TRUE(eventually([&] { return count_children(c, b) == 1; }));
  EXPECT_EQ(c.children(b).front(), split_path(b_holder.node_path()).second);
  EXPECT_TRUE(b_holder.valid());

  // The same with a stop_token.
  std::stop_source stop;
  auto waiter = std::async(std::launch::async, [&] { return multi.acquire(stop.get_token(), {.owner = "both"}); });
  ASSERT_TRUE(eventually([&] { return count_children(c, a) == 1 && count_children(c, b) == 2; }));
  stop.request_stop();
  EXPECT_THROW(waiter.get(), Error);
  EXPECT_EQ(count_children(c, a), 0u);
  EXPECT_TRUE(eventually([&] { return count_children(c, b) == 1; }));
}

// acquire_async: granted once B's holder lets go, every member held; then,
// with B held again, a timeout that releases A and leaves B's holder alone.
TEST(MultiLock, AcquireAsyncGrantsTheWholeSetOrReleasesWhatItTook) {
  Client c(shared_opts());
  Client other(shared_opts());
  const auto base = unique_lock_path("multi-async");
  const auto a = base + "/a", b = base + "/b";
  FairMutex b_lock(other, b);
  Lease b_holder = b_lock.acquire({.owner = "b-holder"});
  MultiLock multi(c, {{b, Mode::exclusive}, {a, Mode::shared}});

  auto granted = std::make_shared<std::promise<MultiAcquireResult>>();
  multi.acquire_async([granted](MultiAcquireResult r) { granted->set_value(std::move(r)); }, {.owner = "both"});
  ASSERT_TRUE(eventually([&] { return count_children(c, a) == 1 && count_children(c, b) == 2; }));
  b_holder.release();
  auto f = granted->get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  auto r = f.get();
  ASSERT_FALSE(r.error.has_value()) << r.error->what();
  ASSERT_TRUE(r.lease);
  EXPECT_TRUE(r.lease.valid());
  EXPECT_EQ(r.lease.lease(a).mode(), Mode::shared);
  EXPECT_EQ(r.lease.lease(b).mode(), Mode::exclusive);
  r.lease.release();

  b_holder = b_lock.acquire({.owner = "b-holder"});
  auto timed_out = std::make_shared<std::promise<MultiAcquireResult>>();
  multi.acquire_async([timed_out](MultiAcquireResult res) { timed_out->set_value(std::move(res)); },
                      {.owner = "both"}, 300ms);
  auto t = timed_out->get_future();
  ASSERT_EQ(t.wait_for(10s), std::future_status::ready);
  auto tr = t.get();
  ASSERT_TRUE(tr.error.has_value());
  EXPECT_EQ(tr.error->code(), Errc::timeout);
  EXPECT_FALSE(tr.lease);
  EXPECT_TRUE(eventually([&] { return count_children(c, a) == 0 && count_children(c, b) == 1; }));
  EXPECT_TRUE(b_holder.valid());
}

TEST(MultiLock, RejectsRetain) {
  Client c(shared_opts());
  EXPECT_THROW(MultiLock(c, {{"/locks/a", Mode::exclusive}}, {.retain = 100ms}), Error);
}

#ifdef ZKLOCK_TEST_WORKER
test::ChildProcess spawn_worker(std::vector<std::string> args) {
  test::SpawnOptions o;
  o.argv = {ZKLOCK_TEST_WORKER};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  return test::ChildProcess::spawn(o);
}

struct PairRun {
  std::optional<std::string> first, second;  // each worker's last line
  long long ms = 0;
};

// Two workers in `mode` over A and B, the first given {A, B}, the second
// {B, A}; started together through a go node. Bounded: 90 s.
PairRun run_opposite_pair(Client& c, const std::string& base, const std::string& mode, int rounds) {
  const auto a = base + "/a", b = base + "/b", go = base + "/go";
  c.ensure_path(base);
  const auto connect = test::shared_server().connect_string();
  auto p1 = spawn_worker({mode, connect, go, std::to_string(rounds), a, b});
  auto p2 = spawn_worker({mode, connect, go, std::to_string(rounds), b, a});
  PairRun run;
  if (p1.read_line(20s).value_or("?") != "ready" || p2.read_line(20s).value_or("?") != "ready") return run;
  const auto start = Clock::now();
  try {
    c.create(go, "", CreateMode::ephemeral);
  } catch (const Error&) {
    return run;
  }
  run.first = p1.read_line(90s);
  run.second = p2.read_line(std::chrono::milliseconds(std::max<long long>(1000, 90000 - ms_since(start))));
  run.ms = ms_since(start);
  EXPECT_EQ(p1.wait_exit(10s).value_or(test::ExitStatus{-1}).describe(), "exit 0");
  EXPECT_EQ(p2.wait_exit(10s).value_or(test::ExitStatus{-1}).describe(), "exit 0");
  return run;
}

// Two processes, opposite orders, 1,000 rounds each: both finish.
TEST(MultiLock, OppositeOrdersInTwoProcessesNeverDeadlock) {
  Client c(shared_opts());
  const auto base = unique_lock_path("multi-deadlock");
  constexpr int kRounds = 1000;
  const auto run = run_opposite_pair(c, base, "multi", kRounds);
  ASSERT_TRUE(run.first && run.first->starts_with("done")) << "process 1: " << run.first.value_or("(no answer: deadlock?)");
  ASSERT_TRUE(run.second && run.second->starts_with("done")) << "process 2: " << run.second.value_or("(no answer: deadlock?)");
  std::printf("2 x %d MultiLock rounds over {A,B} / {B,A} in %lld ms (%s; %s)\n", kRounds, run.ms,
              run.first->c_str(), run.second->c_str());
  EXPECT_EQ(count_children(c, base + "/a"), 0u);
  EXPECT_EQ(count_children(c, base + "/b"), 0u);
}

// The control, showing the test above has teeth: the same rounds taken in
// the given order (FairMutex A then B, with a 1 s limit on the second) stall.
TEST(MultiLock, WithoutTheGlobalOrderTheSameRoundsDeadlock) {
  Client c(shared_opts());
  const auto base = unique_lock_path("multi-naive");
  const auto run = run_opposite_pair(c, base, "naive", 1000);
  ASSERT_TRUE(run.first && run.second) << "a worker did not answer";
  std::printf("without MultiLock: %s; %s (%lld ms)\n", run.first->c_str(), run.second->c_str(), run.ms);
  EXPECT_TRUE(run.first->starts_with("stalled") || run.second->starts_with("stalled"));
}

// ---------------------------------------------------------------------------
// Striped

TEST(Striped, TwoProcessesAgreeOnTheStripeOf10000Keys) {
  const auto connect = test::shared_server().connect_string();
  constexpr int kKeys = 10000;
  auto p1 = spawn_worker({"stripes", connect, "/locks/account", "16", std::to_string(kKeys)});
  auto p2 = spawn_worker({"stripes", connect, "/locks/account", "16", std::to_string(kKeys)});
  Client c(shared_opts());
  StripedMutex mine(c, "/locks/account", 16);
  std::vector<int> per_stripe(16, 0);
  for (int i = 0; i < kKeys; ++i) {
    auto l1 = p1.read_line(10s), l2 = p2.read_line(10s);
    ASSERT_TRUE(l1 && l2) << "key " << i;
    ASSERT_EQ(*l1, *l2) << "key " << i;
    const auto key = "key-" + std::to_string(i);
    ASSERT_EQ(*l1, std::to_string(i) + " " + mine.for_key(key).path()) << "key " << i;
    ++per_stripe[mine.stripe_index(key)];
  }
  EXPECT_EQ(p1.read_line(10s).value_or(""), "done");
  EXPECT_EQ(p2.read_line(10s).value_or(""), "done");
  const auto [lo, hi] = std::minmax_element(per_stripe.begin(), per_stripe.end());
  std::printf("10000 keys agreed by 2 processes; per stripe %d..%d\n", *lo, *hi);
}
#endif

TEST(Striped, ForKeyIsTheFairMutexAtItsStripe) {
  Client c(shared_opts());
  const auto base = unique_lock_path("striped");
  StripedMutex striped(c, base, 16);
  EXPECT_EQ(striped.size(), 16u);
  EXPECT_EQ(striped.stripe_index("acct-991"), 2u);
  FairMutex& m = striped.for_key("acct-991");
  EXPECT_EQ(m.path(), base + "/stripe-2");
  EXPECT_EQ(&m, &striped.stripe(2));
  Lease l = m.acquire();
  EXPECT_EQ(split_path(l.node_path()).first, base + "/stripe-2");
  // A key on another stripe is independent.
  const std::string other_key = "acct-0";  // stripe 15
  ASSERT_NE(striped.stripe_index(other_key), 2u);
  EXPECT_TRUE(striped.for_key(other_key).try_acquire_for(5s).has_value());
  EXPECT_THROW(StripedMutex(c, base, 0), Error);
}

}  // namespace
}  // namespace zklock
