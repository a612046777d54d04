// One lock contract, run against every exclusive lock zklock has, plus the
// read-write, multi-lock and striped stories — all against a real server.
//
//   LockContract/*   mutual exclusion across threads and sessions, FIFO
//                    with increasing tokens, try_acquire_for timeout and
//                    stop_token cancellation leave no node, external
//                    deletion → on_lost(revoked). Typed over an adapter per
//                    lock: FairMutex, FairSharedMutex (exclusive side),
//                    MultiLock.
//   ReadWrite.*      readers together, writers alone, R R W R, a reader
//                    stream does not starve a writer, tokens in grant order.
//   MultiLock.*      order and merging, all-or-nothing, two processes with
//                    opposite orders.
//   Striped.*        two processes agree on the stripe of 10,000 keys.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <future>
#include <map>
#include <mutex>
#include <thread>

#include "zk_harness.hpp"
#include "zklock/fair_mutex.hpp"
#include "zklock/multi_lock.hpp"
#include "zklock/shared_mutex.hpp"
#include "zklock/striped_mutex.hpp"
#include "zklock/protocol/node_name.hpp"

namespace zklock {
namespace {

using test::unique_lock_path;

ClientOptions shared_opts() { return {.connect = test::shared_server().connect_string(), .session_timeout = 4s}; }

using test::eventually;

// Children of a lock path; an absent path (a reaped container) has none.
std::size_t count_children(Client& c, const std::string& path) {
  try {
    return c.children(path).size();
  } catch (const Error& e) {
    if (e.code() == Errc::no_node) return 0;
    throw;
  }
}

// Runs after every callback already queued on c's callback thread.
void drain_callbacks(Client& c) {
  std::promise<void> p;
  c.post([&] { p.set_value(); });
  ASSERT_EQ(p.get_future().wait_for(5s), std::future_status::ready);
}

long long ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

// ---------------------------------------------------------------------------
// Adapters: the one shape the contract suite drives. `paths()` lists the
// lock paths a holder has nodes under, in acquisition order; waiters queue
// under the first one.

struct FairMutexLock {
  using Held = Lease;
  FairMutexLock(Client& c, const std::string& base) : m(c, base) {}
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
  FairMutex m;
};

struct SharedMutexExclusiveSide {
  using Held = Lease;
  SharedMutexExclusiveSide(Client& c, const std::string& base) : m(c, base) {}
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
  FairSharedMutex m;
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
using LockTypes = ::testing::Types<FairMutexLock, SharedMutexExclusiveSide, MultiLockPair>;
class LockTypeNames {
 public:
  template <class T>
  static std::string GetName(int) {
    if (std::is_same_v<T, FairMutexLock>) return "FairMutex";
    if (std::is_same_v<T, SharedMutexExclusiveSide>) return "FairSharedMutexExclusive";
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

// ---------------------------------------------------------------------------
// Read-write

TEST(ReadWrite, ManyReadersHoldAtOnce) {
  Client c(shared_opts());
  Client c2(shared_opts());
  const auto path = unique_lock_path("rw-readers");
  FairSharedMutex m(c, path), m2(c2, path);
  std::vector<Lease> readers;
  for (int i = 0; i < 8; ++i) {
    auto& mx = i % 2 == 0 ? m : m2;
    auto l = mx.try_acquire_shared_for(5s, {.owner = "r" + std::to_string(i)});
    ASSERT_TRUE(l.has_value()) << "reader " << i << " not granted while only readers hold";
    EXPECT_EQ(l->mode(), Mode::shared);
    readers.push_back(std::move(*l));
  }
  EXPECT_EQ(count_children(c, path), 8u);
  for (const auto& l : readers) EXPECT_TRUE(l.valid());
  for (std::size_t i = 1; i < readers.size(); ++i) EXPECT_TRUE(readers[i - 1].token() < readers[i].token());
  readers.clear();
  EXPECT_EQ(count_children(c, path), 0u);
}

TEST(ReadWrite, WriterExcludesEveryone) {
  Client c(shared_opts());
  Client c2(shared_opts());
  const auto path = unique_lock_path("rw-writer");
  FairSharedMutex m(c, path), m2(c2, path);
  {
    // Readers hold: a writer waits.
    Lease r1 = m.acquire_shared({.owner = "r1"});
    Lease r2 = m2.acquire_shared({.owner = "r2"});
    EXPECT_FALSE(m2.try_acquire_for(300ms, {.owner = "w"}).has_value());
  }
  Lease w = m.acquire({.owner = "w"});
  EXPECT_FALSE(m2.try_acquire_shared_for(300ms, {.owner = "r"}).has_value());
  EXPECT_FALSE(m2.try_acquire_for(300ms, {.owner = "w2"}).has_value());
  // A FairMutex on the same path is the same lock: its nodes are writers.
  FairMutex plain(c2, path);
  EXPECT_FALSE(plain.try_acquire_for(300ms, {.owner = "w3"}).has_value());
  EXPECT_TRUE(eventually([&] { return count_children(c, path) == 1; }));
  w.release();
  EXPECT_TRUE(m2.try_acquire_shared_for(5s, {.owner = "r"}).has_value());
}

// The queue R1 R2 W R3: W waits for both readers — releasing R2, its
// immediate predecessor, proves nothing about R1 — and R3 waits for W.
TEST(ReadWrite, QueueRRWRGrantsLastReaderOnlyAfterWriter) {
  Client c(shared_opts());
  Client c2(shared_opts());
  const auto path = unique_lock_path("rw-rrwr");
  FairSharedMutex m(c, path), m2(c2, path);
  Lease r1 = m.acquire_shared({.owner = "r1"});
  Lease r2 = m2.acquire_shared({.owner = "r2"});
  std::atomic<int> seq{0};
  int w_seq = -1, r3_seq = -1;
  std::promise<AcquireResult> w_p, r3_p;
  m2.acquire_async(
      [&](AcquireResult r) {
        w_seq = seq++;
        w_p.set_value(std::move(r));
      },
      {.owner = "w"});
  ASSERT_TRUE(eventually([&] { return count_children(c, path) == 3; }));
  m.acquire_shared_async(
      [&](AcquireResult r) {
        r3_seq = seq++;
        r3_p.set_value(std::move(r));
      },
      {.owner = "r3"});
  ASSERT_TRUE(eventually([&] { return count_children(c, path) == 4; }));
  auto w_f = w_p.get_future();
  auto r3_f = r3_p.get_future();
  // A reader is granted within a round trip or two when it may be; give a
  // wrong grant ample time to show.
  EXPECT_EQ(r3_f.wait_for(300ms), std::future_status::timeout) << "R3 overtook the waiting writer";
  EXPECT_EQ(w_f.wait_for(0ms), std::future_status::timeout);
  r2.release();  // W's predecessor: its release says nothing about R1
  EXPECT_EQ(w_f.wait_for(300ms), std::future_status::timeout) << "writer granted while R1 holds";
  r1.release();
  ASSERT_EQ(w_f.wait_for(5s), std::future_status::ready);
  AcquireResult w = w_f.get();
  ASSERT_FALSE(w.error) << w.error->what();
  EXPECT_EQ(r3_f.wait_for(300ms), std::future_status::timeout) << "R3 granted while the writer holds";
  const auto w_token = w.lease.token();
  w.lease.release();
  ASSERT_EQ(r3_f.wait_for(5s), std::future_status::ready);
  AcquireResult r3 = r3_f.get();
  ASSERT_FALSE(r3.error) << r3.error->what();
  EXPECT_LT(w_seq, r3_seq);
  EXPECT_TRUE(r2.token() < w_token);
  EXPECT_TRUE(w_token < r3.lease.token());
}

// Readers hold in overlapping turns, so the lock is never free of readers;
// a writer that arrives is still granted once the readers ahead of it are
// done, and readers arriving after it wait.
TEST(ReadWrite, ReaderStreamDoesNotStarveWriter) {
  Client readers_client(shared_opts());
  Client writer_client(shared_opts());
  const auto path = unique_lock_path("rw-stream");
  FairSharedMutex m(readers_client, path), mw(writer_client, path);
  constexpr int kReaders = 4;
  std::atomic<bool> stop{false};
  std::atomic<int> inside{0}, max_inside{0}, reader_grants{0}, writer_overlaps{0};
  std::atomic<bool> writer_inside{false};
  std::vector<std::thread> threads;
  for (int i = 0; i < kReaders; ++i) {
    threads.emplace_back([&, i] {
      while (!stop) {
        Lease l = m.acquire_shared({.owner = "reader-" + std::to_string(i)});
        if (writer_inside) ++writer_overlaps;
        const int now = inside.fetch_add(1) + 1;
        int seen = max_inside.load();
        while (now > seen && !max_inside.compare_exchange_weak(seen, now)) {
        }
        ++reader_grants;
        std::this_thread::sleep_for(20ms);  // the reader's work
        inside.fetch_sub(1);
      }
    });
  }
  // The stream is flowing and readers overlap.
  ASSERT_TRUE(eventually([&] { return reader_grants >= 40 && max_inside >= 2; }, 30s));
  const int grants_before = reader_grants;
  const auto start = Clock::now();
  auto w = mw.try_acquire_for(10s, {.owner = "writer"});
  const auto waited = ms_since(start);
  ASSERT_TRUE(w.has_value()) << "writer starved by the reader stream";
  writer_inside = true;
  const int inside_at_grant = inside.load();
  const int grants_during_wait = reader_grants - grants_before;
  std::this_thread::sleep_for(50ms);  // hold: readers must queue behind us
  writer_inside = false;
  w->release();
  stop = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(inside_at_grant, 0);
  EXPECT_EQ(writer_overlaps.load(), 0);
  EXPECT_LT(waited, 2000);
  std::printf("writer waited %lld ms behind a stream of %d readers (max %d holding at once; %d reader grants "
              "during the wait, %d in total)\n",
              waited, kReaders, max_inside.load(), grants_during_wait, reader_grants.load());
}

// A mixed workload over three sessions: every grant's token exceeds the
// token of every writer granted before it, and a writer's token exceeds
// every token granted before it.
TEST(ReadWrite, TokensIncreaseInGrantOrder) {
  constexpr int kSessions = 3, kThreads = 6, kRounds = 10;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kSessions; ++i) clients.push_back(std::make_unique<Client>(shared_opts()));
  const auto path = unique_lock_path("rw-tokens");
  struct Grant {
    Mode mode;
    FencingToken token;
  };
  std::mutex mu;
  std::vector<Grant> grants;
  std::atomic<int> writers_inside{0}, readers_inside{0}, violations{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      FairSharedMutex m(*clients[static_cast<std::size_t>(t % kSessions)], path);
      const AcquireOptions o{.owner = "t" + std::to_string(t)};
      for (int i = 0; i < kRounds; ++i) {
        const bool write = (t + i) % 3 == 0;
        Lease l = write ? m.acquire(o) : m.acquire_shared(o);
        if (write) {
          if (writers_inside.fetch_add(1) != 0 || readers_inside.load() != 0) ++violations;
        } else {
          readers_inside.fetch_add(1);
          if (writers_inside.load() != 0) ++violations;
        }
        {
          std::lock_guard lk(mu);
          grants.push_back({write ? Mode::exclusive : Mode::shared, l.token()});
        }
        std::this_thread::yield();
        (write ? writers_inside : readers_inside).fetch_sub(1);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(violations.load(), 0);
  ASSERT_EQ(grants.size(), static_cast<std::size_t>(kThreads * kRounds));
  int checked = 0;
  for (std::size_t k = 0; k < grants.size(); ++k) {
    for (std::size_t j = 0; j < k; ++j) {
      if (grants[j].mode == Mode::exclusive || grants[k].mode == Mode::exclusive) {
        ++checked;
        EXPECT_TRUE(grants[j].token < grants[k].token) << "grant " << j << " vs " << k;
      }
    }
  }
  std::printf("%zu grants, %d ordered pairs checked\n", grants.size(), checked);
}

TEST(ReadWrite, SharedLeaseLossIsReported) {
  Client c(shared_opts());
  Client other(shared_opts());
  FairSharedMutex m(c, unique_lock_path("rw-revoked"));
  Lease r = m.acquire_shared({.owner = "r"});
  std::promise<LossReason> lost;
  r.on_lost([&](LossReason why, const std::string&) { lost.set_value(why); });
  other.remove_async(r.node_path(), -1, [](Status) {});
  auto f = lost.get_future();
  ASSERT_EQ(f.wait_for(5s), std::future_status::ready);
  EXPECT_EQ(f.get(), LossReason::revoked);
  EXPECT_FALSE(r.valid());
}

// ---------------------------------------------------------------------------
// MultiLock

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
