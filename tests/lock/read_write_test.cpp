// FairSharedMutex against a real server: readers together, writers alone,
// R R W R, a reader stream does not starve a writer, tokens in grant order, a
// shared lease's loss. Its exclusive side is also in the lock contract suite
// (contract_test.cpp).
#include <gtest/gtest.h>

#include <atomic>
#include <cstdio>
#include <future>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "lock_test_support.hpp"
#include "zk_harness.hpp"
#include "zklock/fair_mutex.hpp"
#include "zklock/shared_mutex.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using lock_test::count_children;
using lock_test::ms_since;
using lock_test::shared_opts;
using test::eventually;
using test::unique_lock_path;

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

}  // namespace
}  // namespace zklock
