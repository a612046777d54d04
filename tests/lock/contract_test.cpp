// One lock contract, run against every exclusive lock zklock has, against a
// real server:
//
//   LockContract/*   mutual exclusion across threads and sessions, FIFO
//                    with increasing tokens, try_acquire_for timeout and
//                    stop_token cancellation leave no node, external
//                    deletion → on_lost(revoked). Typed over an adapter per
//                    lock: FairMutex, FairSharedMutex (exclusive side),
//                    MultiLock.
//
// The read-write stories are in read_write_test.cpp, MultiLock's and
// StripedMutex's own in multi_lock_test.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "lock_test_support.hpp"
#include "zk_harness.hpp"
#include "zklock/fair_mutex.hpp"
#include "zklock/multi_lock.hpp"
#include "zklock/shared_mutex.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using lock_test::count_children;
using lock_test::shared_opts;
using test::eventually;
using test::unique_lock_path;

// Runs after every callback already queued on c's callback thread.
void drain_callbacks(Client& c) {
  std::promise<void> p;
  c.post([&] { p.set_value(); });
  ASSERT_EQ(p.get_future().wait_for(5s), std::future_status::ready);
}

// ---------------------------------------------------------------------------
// Adapters: the one shape the contract suite drives. `paths()` lists the
// lock paths a holder has nodes under, in acquisition order; waiters queue
// under the first one.

// A lock whose acquire() takes it exclusively and hands out one Lease:
// FairMutex, and FairSharedMutex's exclusive side.
template <class M>
struct ExclusiveSide {
  using Held = Lease;
  ExclusiveSide(Client& c, const std::string& base) : m(c, base) {}
  Held acquire(const AcquireOptions& o) { return m.acquire(o); }
  Held acquire(std::stop_token s, const AcquireOptions& o) { return m.acquire(std::move(s), o); }
  std::optional<Held> try_acquire_for(std::chrono::milliseconds t, const AcquireOptions& o) {
    return m.try_acquire_for(t, o);
  }
  std::vector<std::string> paths() const { return {m.path()}; }
  static std::vector<const Lease*> members(const Held& h) { return {&h}; }
  static void on_lost(Held& h, std::function<void(LossReason)> cb) {
    h.on_lost([cb](LossReason r, const std::string&) { cb(r); });
  }
  static bool valid(const Held& h) { return h.valid(); }
  static std::stop_token lost_token(const Held& h) { return h.lost_token(); }
  M m;
};

// Two members, listed out of order and with a duplicate, so every contract
// test also runs through sorting, merging and the unwinding paths.
struct MultiLockPair {
  using Held = MultiLease;
  MultiLockPair(Client& c, const std::string& base)
      : m(c, {{base + "/b", Mode::exclusive}, {base + "/a", Mode::shared}, {base + "/a", Mode::exclusive}}) {}
  Held acquire(const AcquireOptions& o) { return m.acquire(o); }
  Held acquire(std::stop_token s, const AcquireOptions& o) { return m.acquire(std::move(s), o); }
  std::optional<Held> try_acquire_for(std::chrono::milliseconds t, const AcquireOptions& o) {
    return m.try_acquire_for(t, o);
  }
  std::vector<std::string> paths() const {
    std::vector<std::string> p;
    for (const auto& l : m.locks()) p.push_back(l.path);
    return p;
  }
  static std::vector<const Lease*> members(const Held& h) {
    std::vector<const Lease*> v;
    for (const auto& l : h.leases()) v.push_back(&l);
    return v;
  }
  static void on_lost(Held& h, std::function<void(LossReason)> cb) {
    h.on_lost([cb](const std::string&, LossReason r, const std::string&) { cb(r); });
  }
  static bool valid(const Held& h) { return h.valid(); }
  static std::stop_token lost_token(const Held& h) { return h.lost_token(); }
  MultiLock m;
};

template <class T>
class LockContract : public ::testing::Test {};
using LockTypes = ::testing::Types<ExclusiveSide<FairMutex>, ExclusiveSide<FairSharedMutex>, MultiLockPair>;
class LockTypeNames {
 public:
  template <class T>
  static std::string GetName(int) {
    if (std::is_same_v<T, ExclusiveSide<FairMutex>>) return "FairMutex";
    if (std::is_same_v<T, ExclusiveSide<FairSharedMutex>>) return "FairSharedMutexExclusive";
    return "MultiLock";
  }
};
TYPED_TEST_SUITE(LockContract, LockTypes, LockTypeNames);

TYPED_TEST(LockContract, MutualExclusionAcrossThreadsAndSessions) {
  constexpr int kSessions = 3, kThreads = 6, kRounds = 12;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kSessions; ++i) clients.push_back(std::make_unique<Client>(shared_opts()));
  const auto base = unique_lock_path("contract-mutex");
  std::atomic<int> inside{0}, overlaps{0}, grants{0}, errors{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      TypeParam lock(*clients[static_cast<std::size_t>(t % kSessions)], base);
      for (int i = 0; i < kRounds; ++i) {
        try {
          auto held = lock.acquire({.owner = "t" + std::to_string(t)});
          if (inside.fetch_add(1) != 0) ++overlaps;
          std::this_thread::yield();
          inside.fetch_sub(1);
          ++grants;
        } catch (const Error& e) {
          ++errors;
          ADD_FAILURE() << e.what();
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(overlaps.load(), 0);
  EXPECT_EQ(errors.load(), 0);
  EXPECT_EQ(grants.load(), kThreads * kRounds);
  TypeParam probe(*clients[0], base);
  for (const auto& p : probe.paths()) EXPECT_EQ(count_children(*clients[0], p), 0u) << p;
}

TYPED_TEST(LockContract, GrantsInArrivalOrderWithIncreasingTokens) {
  Client c(shared_opts());
  Client other(shared_opts());
  const auto base = unique_lock_path("contract-fifo");
  TypeParam lock(c, base);
  TypeParam other_lock(other, base);
  const auto queue = lock.paths().front();
  auto holder = other_lock.acquire({.owner = "holder"});
  const auto holder_count = count_children(c, queue);
  constexpr int kWaiters = 6;
  std::mutex mu;
  std::vector<int> order;
  std::vector<FencingToken> tokens;
  std::vector<std::thread> threads;
  for (int i = 0; i < kWaiters; ++i) {
    threads.emplace_back([&, i] {
      auto held = lock.acquire({.owner = "w" + std::to_string(i)});
      std::lock_guard lk(mu);
      order.push_back(i);
      tokens.push_back(TypeParam::members(held).front()->token());
    });
    // Queue them one by one so the arrival order is known.
    ASSERT_TRUE(eventually([&] { return count_children(c, queue) == holder_count + static_cast<std::size_t>(i + 1); }));
  }
  const auto first_holder_token = TypeParam::members(holder).front()->token();
  holder = {};  // releases
  for (auto& t : threads) t.join();
  ASSERT_EQ(order.size(), static_cast<std::size_t>(kWaiters));
  for (int i = 0; i < kWaiters; ++i) EXPECT_EQ(order[static_cast<std::size_t>(i)], i);
  EXPECT_TRUE(first_holder_token < tokens[0]);
  for (std::size_t i = 1; i < tokens.size(); ++i) EXPECT_TRUE(tokens[i - 1] < tokens[i]) << i;
}

TYPED_TEST(LockContract, TryAcquireForTimesOutAndLeavesNoNode) {
  Client c(shared_opts());
  Client other(shared_opts());
  const auto base = unique_lock_path("contract-timeout");
  TypeParam lock(c, base);
  TypeParam other_lock(other, base);
  auto holder = other_lock.acquire({.owner = "holder"});
  std::map<std::string, std::size_t> held_counts;
  for (const auto& p : lock.paths()) held_counts[p] = count_children(c, p);
  const auto start = Clock::now();
  auto r = lock.try_acquire_for(300ms, {.owner = "waiter"});
  EXPECT_FALSE(r.has_value());
  EXPECT_GE(Clock::now() - start, 290ms);
  for (const auto& [p, n] : held_counts) {
    EXPECT_TRUE(eventually([&, &p = p, n = n] { return count_children(c, p) == n; })) << p;
  }
  holder = {};
  for (const auto& p : lock.paths()) EXPECT_TRUE(eventually([&] { return count_children(c, p) == 0; })) << p;
  // Free again: the abandoned attempt left nothing that blocks.
  auto again = lock.try_acquire_for(5s, {.owner = "waiter"});
  EXPECT_TRUE(again.has_value());
}

TYPED_TEST(LockContract, StopTokenCancelsAndLeavesNoNode) {
  Client c(shared_opts());
  Client other(shared_opts());
  const auto base = unique_lock_path("contract-cancel");
  TypeParam lock(c, base);
  TypeParam other_lock(other, base);
  auto holder = other_lock.acquire({.owner = "holder"});
  std::map<std::string, std::size_t> held_counts;
  for (const auto& p : lock.paths()) held_counts[p] = count_children(c, p);
  const auto queue = lock.paths().front();
  std::stop_source stop;
  auto waiter = std::async(std::launch::async, [&] { return lock.acquire(stop.get_token(), {.owner = "waiter"}); });
  ASSERT_TRUE(eventually([&] { return count_children(c, queue) == held_counts[queue] + 1; }));
  stop.request_stop();
  try {
    waiter.get();
    ADD_FAILURE() << "not cancelled";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), Errc::cancelled);
  }
  for (const auto& [p, n] : held_counts) {
    EXPECT_TRUE(eventually([&, &p = p, n = n] { return count_children(c, p) == n; })) << p;
  }
}

// Every member node deleted by someone else: the holder hears revoked,
// once, and the lease is no longer valid.
TYPED_TEST(LockContract, ExternalDeletionIsReportedAsRevokedOnce) {
  Client c(shared_opts());
  Client other(shared_opts());
  TypeParam lock(c, unique_lock_path("contract-revoked"));
  auto held = lock.acquire({.owner = "holder"});
  ASSERT_TRUE(TypeParam::valid(held));
  std::atomic<int> calls{0};
  std::promise<LossReason> first;
  TypeParam::on_lost(held, [&](LossReason r) {
    if (calls.fetch_add(1) == 0) first.set_value(r);
  });
  const auto deleted = Clock::now();
  for (const auto* m : TypeParam::members(held)) other.remove_async(m->node_path(), -1, [](Status) {});
  auto f = first.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  const auto took = Clock::now() - deleted;
  EXPECT_EQ(f.get(), LossReason::revoked);
  // Every member has seen its loss; then flush the callback thread so a
  // second (wrong) notification would have run by now.
  for (const auto* m : TypeParam::members(held)) {
    EXPECT_TRUE(eventually([&] { return m->loss_reason().has_value(); }));
  }
  drain_callbacks(c);
  EXPECT_EQ(calls.load(), 1);
  EXPECT_FALSE(TypeParam::valid(held));
  EXPECT_TRUE(TypeParam::lost_token(held).stop_requested());
  std::printf("revocation noticed in %lld us\n",
              static_cast<long long>(std::chrono::duration_cast<std::chrono::microseconds>(took).count()));
}

}  // namespace
}  // namespace zklock
