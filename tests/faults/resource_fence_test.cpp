// A stale lease refused by the resource it guards, end to end: real
// zklock_test_worker story processes write through the real fenced-store.
// A holder frozen past its session believes it still holds; the store (exit
// 65 and its message) and a FenceGate service (a rejection logged for the
// operator) refuse its write; one fence covers every key of one lock; and
// two lock services' tokens for one resource are unordered, so the second is
// refused as foreign. Each test asserts the outcome and prints the figure it
// measured ("[story] ..." lines).
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <compare>
#include <cstdio>

#include "story_support.hpp"
#include "zklock/fence_gate.hpp"

namespace zklock::stories {
namespace {

using test::ZkHandle;
using test::ZkServer;

// ---------------------------------------------------------------------------
// A lease expires while its holder believes it is alive, seen from the
// resource: the fenced store (exit 65 and its message to the client) and a
// FenceGate service (a rejection logged for the operator).
TEST(ResourceFence, StaleLeaseIsRefusedByTheStoreAndByAFenceGate) {
  auto& zk = test::shared_server();
  TempDir dir;
  const std::string db = (dir / "store.db").string();
  const std::string lock = test::unique_path("story7");
  auto ring = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  auto gate_log = std::make_shared<spdlog::logger>("story7-gate", ring);
  spdlog::register_logger(gate_log);
  FenceGate gate(FenceGateOptions{.logger_name = "story7-gate"});

  auto a = start_ready(config("A", zk.connect_string(), lock, db));
  auto b = start_ready(config("B", zk.connect_string(), lock, db));
  auto probe = ZkHandle::connect(zk.connect_string());
  a.send("acquire");
  const auto acq_a = a.expect("acquired", 10000ms);
  a.send("write invoice A-1");
  EXPECT_EQ(a.expect("write", 10000ms).get("rc"), "0");
  EXPECT_TRUE(gate.admit("invoice", acq_a.get("token")));
  b.send("acquire");
  wait_queue_size(probe, lock, 2);

  a.signal(SIGSTOP);  // A believes it holds the lock; the lease runs out
  const auto acq_b = b.expect("acquired", 10000ms);
  b.send("write invoice B-1");
  EXPECT_EQ(b.expect("write", 10000ms).get("rc"), "0");
  EXPECT_TRUE(gate.admit("invoice", acq_b.get("token")));

  a.send("write invoice A-2");
  a.signal(SIGCONT);
  const auto w = a.expect("write", 10000ms);
  EXPECT_EQ(w.get("rc"), "65") << w.raw;
  EXPECT_NE(w.get("msg").find("rejected stale token " + acq_a.get("token")), std::string::npos) << w.raw;
  EXPECT_NE(w.get("msg").find("highest seen " + acq_b.get("token")), std::string::npos) << w.raw;
  const auto verdict = gate.admit("invoice", acq_a.get("token"));
  EXPECT_EQ(verdict.verdict, AdmitResult::Verdict::stale);
  EXPECT_EQ(gate.rejections().stale, 1u);
  const auto logged = ring->last_formatted();
  ASSERT_FALSE(logged.empty());
  EXPECT_NE(logged.back().find("stale"), std::string::npos) << logged.back();
  EXPECT_EQ(store_get(db, "invoice"), std::optional<std::string>("B-1"));
  spdlog::drop("story7-gate");

  std::string line = logged.back();
  while (!line.empty() && line.back() == '\n') line.pop_back();
  report("S7 stale lease: client got exit 65 '%s'; FenceGate verdict %s, logged: %s", w.get("msg").c_str(),
         std::string(verdict_name(verdict.verdict)).c_str(), line.c_str());
}

// ---------------------------------------------------------------------------
// One lock guards two keys of one fence; the holder is frozen past its
// session, the successor writes one key, the thawed former holder's write to
// the other key is refused (exit 65).
TEST(ResourceFence, OneFencePerLockRefusesTheThawedHolderOnAKeyTheSuccessorNeverWrote) {
  auto& zk = test::shared_server();
  TempDir dir;
  const std::string db = (dir / "store.db").string();
  const std::string lock = test::unique_path("v3");
  auto a = StoryWorker::start(config("A", zk.connect_string(), lock, db, 1000));
  a.expect("ready", 20000ms);
  auto b = StoryWorker::start(config("B", zk.connect_string(), lock, db, 1000));
  b.expect("ready", 20000ms);
  a.send("acquire");
  const auto acq_a = a.expect("acquired", 10000ms);
  a.send("write balance 100 account-7");
  EXPECT_EQ(a.expect("write", 10000ms).get("rc"), "0");
  a.send("write history deposit-100 account-7");
  EXPECT_EQ(a.expect("write", 10000ms).get("rc"), "0");
  b.send("acquire");

  a.signal(SIGSTOP);  // past its session: B is granted
  const auto acq_b = b.expect("acquired", 10000ms);
  b.send("write balance 50 account-7");  // B touches only the balance
  EXPECT_EQ(b.expect("write", 10000ms).get("rc"), "0");

  a.send("write history withdraw-100 account-7");  // read the instant A resumes
  a.signal(SIGCONT);
  const auto w = a.expect("write", 10000ms);
  EXPECT_EQ(w.get("rc"), "65") << w.raw;
  EXPECT_NE(w.get("msg").find("fence account-7"), std::string::npos) << w.raw;
  EXPECT_NE(w.get("msg").find("highest seen " + acq_b.get("token")), std::string::npos) << w.raw;
  EXPECT_EQ(store_get(db, "history"), std::optional<std::string>("deposit-100"));
  EXPECT_EQ(store_get(db, "balance"), std::optional<std::string>("50"));
  report("V3 one fence, two keys: A (%s) thawed and wrote the key B never touched: exit %s '%s'",
         acq_a.get("token").c_str(), w.get("rc").c_str(), w.get("msg").c_str());
}

// ---------------------------------------------------------------------------
// Two lock services against one resource: their tokens are unordered, and
// the resource refuses the second service's as foreign.
TEST(ResourceFence, TokensOfTwoLockServicesAreRefusedAsForeign) {
  ZkServer zk1, zk2;
  zk1.start();
  zk2.start();
  TempDir dir;
  const std::string db = (dir / "store.db").string();
  const std::string lock = "/story8/resource";
  // Push the second ensemble's zxid counter well past the first's, so its
  // tokens are numerically larger.
  {
    auto h2 = ZkHandle::connect(zk2.connect_string());
    h2.ensure("/story8-filler");
    for (int i = 0; i < 200; ++i) h2.create("/story8-filler/n" + std::to_string(i), "", 0);
  }
  auto a = start_ready(config("A", zk1.connect_string(), lock, db));
  auto b = start_ready(config("B", zk2.connect_string(), lock, db));
  a.send("acquire");
  const auto acq_a = a.expect("acquired", 10000ms);
  b.send("acquire");
  const auto acq_b = b.expect("acquired", 10000ms);  // both "hold" the same resource's lock
  const auto ta = token_of(acq_a), tb = token_of(acq_b);
  ASSERT_NE(ta.ensemble_id(), tb.ensemble_id());
  ASSERT_GT(tb.czxid(), ta.czxid()) << "the second ensemble's token must be numerically larger";
  EXPECT_TRUE(std::is_eq(ta <=> ta));
  EXPECT_FALSE(ta < tb || ta > tb || ta == tb) << "tokens of two ensembles must be unordered";

  a.send("write resource from-A");
  EXPECT_EQ(a.expect("write", 10000ms).get("rc"), "0");
  b.send("write resource from-B");
  const auto wb = b.expect("write", 10000ms);
  EXPECT_EQ(wb.get("rc"), "65") << wb.raw;
  EXPECT_NE(wb.get("msg").find("ensemble"), std::string::npos) << wb.raw;
  EXPECT_EQ(store_get(db, "resource"), std::optional<std::string>("from-A"));

  FenceGate gate;
  EXPECT_TRUE(gate.admit("resource", ta));
  const auto v = gate.admit("resource", tb);
  EXPECT_EQ(v.verdict, AdmitResult::Verdict::foreign_source);
  report("S8 two lock services: A token %s, B token %s (czxid %lld > %lld); store rejected B (exit 65): %s; "
         "FenceGate: %s",
         acq_a.get("token").c_str(), acq_b.get("token").c_str(), static_cast<long long>(tb.czxid()),
         static_cast<long long>(ta.czxid()), wb.get("msg").c_str(), v.reason().c_str());
}

}  // namespace
}  // namespace zklock::stories
