// Faults of the lock service, told with real processes against real
// ZooKeeper servers on loopback: a standalone server restarted within the
// session timeout, one member of a three-server ensemble restarted, and
// quorum lost and regained. Each test asserts the outcome and prints the
// figure it measured ("[story] ..." lines).
//
// Servers use a 200 ms tick; workers use short session timeouts, so the set
// runs in a few minutes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <map>

#include "story_support.hpp"

namespace zklock::stories {
namespace {

using test::ZkEnsemble;
using test::ZkHandle;
using test::ZkServer;
using test::ZkServerOptions;

// Holding intervals [acquired, releasing|lost] of every worker, in microseconds.
struct Interval {
  std::string who;
  std::int64_t from = 0, to = 0;
};
std::vector<Interval> holding_intervals(const std::vector<const StoryWorker*>& workers, std::int64_t end_us) {
  std::vector<Interval> out;
  for (auto* w : workers) {
    std::map<std::string, Interval> open;  // idx -> interval
    for (auto& e : w->events()) {
      const auto idx = e.get("idx");
      if (e.kind == "acquired") {
        open[idx] = Interval{w->name() + "#" + idx + " " + e.get("token"), e.t_us, end_us};
      } else if ((e.kind == "releasing" || e.kind == "lost") && open.count(idx)) {
        auto iv = open[idx];
        iv.to = e.t_us;
        out.push_back(iv);
        open.erase(idx);
      }
    }
    for (auto& [idx, iv] : open) out.push_back(iv);
  }
  std::sort(out.begin(), out.end(), [](const Interval& a, const Interval& b) { return a.from < b.from; });
  return out;
}

// The checker: no two holding intervals overlap.
void expect_no_overlap(const std::vector<Interval>& ivs) {
  for (std::size_t i = 1; i < ivs.size(); ++i) {
    EXPECT_LE(ivs[i - 1].to, ivs[i].from) << "overlapping holders: " << ivs[i - 1].who << " and " << ivs[i].who;
  }
}

// ---------------------------------------------------------------------------
// The lock service restarts (standalone, within the session timeout): the
// tolerant holder keeps its session, node and token; the strict one is told
// at the disconnect and its node is deleted once reconnected.
TEST(ServerRestart, StandaloneWithinTheSessionKeepsTheTolerantLeaseAndEndsTheStrict) {
  ZkServerOptions o;
  o.max_session_timeout = 20000ms;
  ZkServer zk(o);
  zk.start();
  const std::string lock_t = test::unique_path("story4t"), lock_s = test::unique_path("story4s");
  Event ready_t, ready_s;
  auto t = start_ready(config("T", zk.connect_string(), lock_t, {}, 8000), &ready_t);
  auto sc = config("S", zk.connect_string(), lock_s, {}, 8000);
  sc.strict = true;
  auto s = start_ready(sc, &ready_s);
  t.send("acquire");
  s.send("acquire");
  const auto acq_t = t.expect("acquired", 10000ms);
  const auto acq_s = s.expect("acquired", 10000ms);

  const auto t0 = mono_us();
  zk.stop();
  zk.start();
  const double restart_ms = ms_between(t0, mono_us());

  // Tolerant (default): suspended, then the same session returns; same node, same token.
  t.expect("state", 10000ms, [](const Event& e) { return e.has("s", "suspended"); });
  const auto back = t.expect("state", 10000ms, [](const Event& e) { return e.has("s", "reconnected"); });
  t.send("check");
  const auto chk = t.expect("check", 5000ms);
  EXPECT_EQ(chk.get("valid"), "1") << chk.raw;
  EXPECT_EQ(chk.get("session"), ready_t.get("session"));
  EXPECT_EQ(chk.get("epoch"), "1");
  auto probe = ZkHandle::connect(zk.connect_string());
  ::Stat st{};
  ASSERT_TRUE(node_exists(probe, acq_t.get("node"), &st)) << "holder's node lost in the restart";
  char sid[32];
  std::snprintf(sid, sizeof sid, "0x%llx", static_cast<unsigned long long>(st.ephemeralOwner));
  EXPECT_EQ(sid, ready_t.get("session"));
  EXPECT_EQ(token_of(acq_t), FencingToken::parse(acq_t.get("token")));  // the lease kept its token
  EXPECT_FALSE(t.saw("lost")) << t.history();

  // Strict: told at the disconnect, and the node is deleted once reconnected.
  const auto lost = s.expect("lost", 10000ms);
  EXPECT_EQ(lost.get("reason"), "disconnected");
  EXPECT_TRUE(eventually([&] { return !node_exists(probe, acq_s.get("node")); }, 10000ms))
      << "strict holder's node survived";

  // The tolerant holder still holds: a waiter queues behind it.
  auto w = start_ready(config("W", zk.connect_string(), lock_t, {}, 8000));
  w.send("acquire");
  wait_queue_size(probe, lock_t, 2);
  t.send("release");
  const auto acq_w = w.expect("acquired", 10000ms);
  EXPECT_GT(token_of(acq_w), token_of(acq_t));

  report("S4 standalone restart: server down-and-up in %.0f ms (session timeout %s ms); tolerant holder "
         "reconnected after %.0f ms with session %s, node and token %s unchanged; strict holder told '%s' and "
         "released",
         restart_ms, ready_t.get("timeout").c_str(), ms_between(t0, back.t_us), chk.get("session").c_str(),
         acq_t.get("token").c_str(), lost.get("reason").c_str());
}

// One member of a three-server ensemble restarted: the holder reconnects with
// its session, the lease valid and the queue intact.
TEST(ServerRestart, EnsembleMemberRestartKeepsTheLeaseAndTheQueue) {
  ZkEnsemble ens;
  ens.start();
  const std::string lock = test::unique_path("story4e");
  Event ready_h;
  auto h = start_ready(config("H", ens.connect_string(), lock, {}, 4000), &ready_h);
  auto w = start_ready(config("W", ens.connect_string(), lock, {}, 4000));
  h.send("acquire");
  const auto acq_h = h.expect("acquired", 10000ms);
  w.send("acquire");
  auto probe = ZkHandle::connect(ens.connect_string());
  wait_queue_size(probe, lock, 2);

  // The member H is connected to: its `cons` lists H's session.
  int member = -1;
  ASSERT_TRUE(eventually(
      [&] {
        for (int i = 0; i < ZkEnsemble::kSize; ++i) {
          auto cons = test::four_letter_word("127.0.0.1", ens.member(i).port(), "cons");
          if (cons && cons->find("sid=" + ready_h.get("session")) != std::string::npos) member = i;
        }
        return member >= 0;
      },
      5000ms));
  const bool was_leader = ens.leader_index() == member;

  const auto t0 = mono_us();
  ens.member(member).stop();
  ens.member(member).start();
  ens.wait_serving(3, test::Clock::now() + 30000ms);
  const double restart_ms = ms_between(t0, mono_us());

  const auto back = h.expect("state", 10000ms, [](const Event& e) { return e.has("s", "reconnected"); });
  h.send("check");
  const auto chk = h.expect("check", 5000ms);
  EXPECT_EQ(chk.get("valid"), "1") << chk.raw;
  EXPECT_EQ(chk.get("session"), ready_h.get("session"));
  EXPECT_FALSE(h.saw("lost")) << h.history();
  EXPECT_FALSE(w.saw("acquired")) << "the waiter was granted while the holder still held";
  auto probe2 = ZkHandle::connect(ens.connect_string());
  EXPECT_TRUE(node_exists(probe2, acq_h.get("node")));
  EXPECT_EQ(queue_of(probe2, lock).size(), 2u) << "a queue node was lost";

  h.send("release");
  const auto acq_w = w.expect("acquired", 10000ms);
  EXPECT_GT(token_of(acq_w), token_of(acq_h));
  report("S4 ensemble: member %d (%s) restarted in %.0f ms; holder disconnected %.0f ms in all, same session %s, "
         "lease valid, token %s; queue intact; waiter granted on release with %s",
         member, was_leader ? "the leader" : "a follower", restart_ms, ms_between(t0, back.t_us),
         chk.get("session").c_str(), acq_h.get("token").c_str(), acq_w.get("token").c_str());
}

// ---------------------------------------------------------------------------
// Quorum is lost: a new acquisition fails within its timeout, the holder
// learns at the validity bound, the minority grants nothing; once quorum
// returns locking works again, and no two holding intervals overlap.
TEST(QuorumLoss, AcquisitionsFailTheHolderLosesAtTheBoundAndLockingReturns) {
  ZkEnsemble ens;
  ens.start();
  const std::string lock = test::unique_path("story6");
  Event ready_h;
  auto h = start_ready(config("H", ens.connect_string(), lock, {}, 2000), &ready_h);
  auto nc = config("N", ens.connect_string(), lock, {}, 2000);
  nc.acquire_timeout_ms = 3000;
  auto n = start_ready(nc);
  h.send("acquire");
  const auto acq_h = h.expect("acquired", 10000ms);

  ens.member(0).stop();
  const auto stopped_at = mono_us();  // quorum is lost while the second member goes down
  ens.member(1).stop();

  // A new acquisition fails within its timeout with a clear error.
  n.send("acquire");
  const auto failed = n.expect("acquire_failed", 10000ms);
  const double fail_ms = ms_between(stopped_at, failed.t_us);
  EXPECT_LE(fail_ms, 3000 + 2000) << failed.raw;

  // The holder learns at the validity bound, not later.
  const auto lost = h.expect("lost", 10000ms);
  const double lost_ms = ms_between(stopped_at, lost.t_us);
  EXPECT_EQ(lost.get("reason"), "validity_expired") << lost.raw;
  EXPECT_LE(lost_ms, std::stoi(ready_h.get("timeout")) + 200);

  // The minority never grants: a client of the surviving member alone gets no session.
  auto mc = config("M", ens.member(2).connect_string(), lock, {}, 2000);
  mc.connect_timeout_ms = 3000;
  auto m = StoryWorker::start(mc);
  const auto fatal = m.expect("fatal", 10000ms);
  EXPECT_EQ(fatal.get("code"), "connect_timeout") << fatal.raw;
  const auto srvr = test::four_letter_word("127.0.0.1", ens.member(2).port(), "srvr").value_or("");
  EXPECT_EQ(srvr.find("Mode: leader"), std::string::npos);
  EXPECT_EQ(srvr.find("Mode: follower"), std::string::npos);
  EXPECT_FALSE(n.saw("acquired"));

  // Quorum returns: locking works again.
  const auto restart_at = mono_us();
  ens.member(0).launch();
  ens.member(1).launch();
  ens.wait_serving(3, test::Clock::now() + 60000ms);
  n.send("acquire");
  const auto acq_n = n.expect("acquired", 15000ms);
  EXPECT_GT(token_of(acq_n), token_of(acq_h));
  n.send("release");
  n.expect("releasing", 5000ms);

  const auto ivs = holding_intervals({&h, &n}, mono_us());
  EXPECT_EQ(ivs.size(), 2u);
  expect_no_overlap(ivs);
  report("S6 quorum lost: new acquisition failed after %.0f ms (%s: %s); holder told lease lost (%s) %.0f ms "
         "after the stop (session timeout %s ms); minority refused clients (%s); locking back %.0f ms after the "
         "members restarted; %zu holding intervals, none overlapping",
         fail_ms, failed.get("code").c_str(), failed.get("msg").c_str(), lost.get("reason").c_str(), lost_ms,
         ready_h.get("timeout").c_str(), fatal.get("code").c_str(), ms_between(restart_at, acq_n.t_us), ivs.size());
}

}  // namespace
}  // namespace zklock::stories
