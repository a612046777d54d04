// The failure stories, automated with real processes against real
// ZooKeeper servers on loopback. Each test is named after its story, asserts
// the outcome, and prints the figure it measured ("[story] ..." lines).
//
// Servers use a 200 ms tick; workers use short session timeouts (1 s unless a
// story needs longer), so the whole set runs in a few minutes.
#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cstdio>
#include <set>

#include "story_support.hpp"
#include "zklock/fence_gate.hpp"
#include "zklock/protocol/node_name.hpp"

namespace zklock::stories {
namespace {

using test::ZkEnsemble;
using test::ZkHandle;
using test::ZkServer;
using test::ZkServerOptions;

constexpr int kTickMs = 200;


void wait_queue_size(ZkHandle& h, const std::string& lock, std::size_t n, milliseconds timeout = 10000ms) {
  if (!eventually([&] { return queue_of(h, lock).size() == n; }, timeout))
    throw StoryError(lock + ": queue did not reach " + std::to_string(n) + " nodes (has " +
                     std::to_string(queue_of(h, lock).size()) + ")");
}

bool node_exists(ZkHandle& h, const std::string& path, ::Stat* st = nullptr) {
  return h.exists(path, st) == ZOK;
}

WorkerConfig config(const std::string& name, const std::string& connect, const std::string& lock,
                    const std::string& db = {}, int session_ms = 1000) {
  WorkerConfig c;
  c.name = name;
  c.connect = connect;
  c.lock = lock;
  c.db = db;
  c.session_timeout_ms = session_ms;
  return c;
}

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
// 1. Freeze the holder past its session timeout.
TEST(Stories, S1_FreezeHolderPastSessionTimeout) {
  auto& zk = test::shared_server();
  TempDir dir;
  const std::string db = (dir / "store.db").string();
  const std::string lock = test::unique_path("story1");
  auto a = start_ready(config("A", zk.connect_string(), lock, db));
  auto b = start_ready(config("B", zk.connect_string(), lock, db));
  auto probe = ZkHandle::connect(zk.connect_string());

  a.send("acquire");
  const auto acq_a = a.expect("acquired", 10000ms);
  a.send("write k A-before-freeze");
  EXPECT_EQ(a.expect("write", 10000ms).get("rc"), "0");
  b.send("acquire");
  wait_queue_size(probe, lock, 2);

  const auto frozen_at = mono_us();
  a.signal(SIGSTOP);
  const auto acq_b = b.expect("acquired", 10000ms);
  EXPECT_GT(token_of(acq_b), token_of(acq_a));
  b.send("write k B-value");
  EXPECT_EQ(b.expect("write", 10000ms).get("rc"), "0");

  // Queued while A is frozen: the write is the first thing A's main thread
  // does on resume, and it reads valid() before issuing it.
  a.send("write k A-stale");
  a.send("check");
  const auto resumed_at = mono_us();
  a.signal(SIGCONT);
  const auto w = a.expect("write", 10000ms);
  EXPECT_EQ(w.get("valid_before"), "0") << "valid() was still true on resume: " << w.raw;
  EXPECT_EQ(w.get("rc"), "65") << w.raw;
  EXPECT_NE(w.get("msg").find("stale"), std::string::npos) << w.raw;
  EXPECT_EQ(a.expect("check", 5000ms).get("valid"), "0");
  const auto lost = a.expect("lost", 10000ms);
  EXPECT_EQ(store_get(db, "k"), std::optional<std::string>("B-value"));

  report("S1 freeze: A frozen %.0f ms; B acquired %.0f ms after the freeze (token %s > %s); "
         "on resume A's valid()=0 before writing; A's write rejected (exit 65): %s; A told: lost %s",
         ms_between(frozen_at, resumed_at), ms_between(frozen_at, acq_b.t_us), acq_b.get("token").c_str(),
         acq_a.get("token").c_str(), w.get("msg").c_str(), lost.get("reason").c_str());
}

// 1b. The same freeze, seen through the loss reason the holder is given.
//
// Regression (fixed in lib/src/lock_attempt.cpp, own_node_gone_locked):
// when the server expires a frozen holder's session it deletes the ephemeral
// node and sends the holder's own exists-watch notification into the
// still-open socket before closing it. On SIGCONT the client could process
// that notification first, fail to read a revocation record (the session is
// gone) and report LossReason::revoked. Without a record it now leaves the
// verdict to the session events (validity_expired or session_expired).
// It is a race (seen about once in a few freezes), so the test freezes up to
// six times.
TEST(Stories, S1_FrozenHolderIsToldExpiryNotRevocation) {
  auto& zk = test::shared_server();
  auto probe = ZkHandle::connect(zk.connect_string());
  std::map<std::string, int> reasons;
  TempDir dir;
  const std::string db = (dir / "store.db").string();
  for (int round = 0; round < 6; ++round) {
    // Exactly story 1: a waiter behind the holder, a write queued for the resume.
    const std::string lock = test::unique_path("story1b");
    auto a = start_ready(config("A", zk.connect_string(), lock, db));
    auto b = start_ready(config("B", zk.connect_string(), lock, db));
    a.send("acquire");
    a.expect("acquired", 10000ms);
    b.send("acquire");
    wait_queue_size(probe, lock, 2);
    a.signal(SIGSTOP);
    b.expect("acquired", 10000ms);
    a.send("write k" + std::to_string(round) + " stale");
    a.signal(SIGCONT);
    const auto lost = a.expect("lost", 10000ms);
    ++reasons[lost.get("reason")];
    EXPECT_NE(lost.get("reason"), "revoked") << "round " << round << ": " << lost.raw;
    if (lost.get("reason") == "revoked") break;
  }
  std::string summary;
  for (auto& [r, n] : reasons) summary += r + "=" + std::to_string(n) + " ";
  report("S1b loss reasons after a freeze past the session: %s", summary.c_str());
}

// ---------------------------------------------------------------------------
// 2. Kill the holder outright.
TEST(Stories, S2_KillHolder) {
  auto& zk = test::shared_server();
  const std::string lock = test::unique_path("story2");
  Event ready_a;
  auto a = start_ready(config("A", zk.connect_string(), lock), &ready_a);
  auto b = start_ready(config("B", zk.connect_string(), lock));
  auto probe = ZkHandle::connect(zk.connect_string());
  a.send("acquire");
  const auto acq_a = a.expect("acquired", 10000ms);
  b.send("acquire");
  wait_queue_size(probe, lock, 2);

  const auto killed_at = mono_us();
  a.signal(SIGKILL);
  const auto acq_b = b.expect("acquired", 10000ms);
  auto st = a.process().wait_exit(5000ms);
  ASSERT_TRUE(st && st->signaled());
  EXPECT_GT(token_of(acq_b), token_of(acq_a));

  const double recovery = ms_between(killed_at, acq_b.t_us);
  const int timeout = std::stoi(ready_a.get("timeout"));
  const int bound = timeout + kTickMs + 300;
  EXPECT_LE(recovery, bound);
  report("S2 kill: recovery %.0f ms (session timeout %d ms + tick %d ms + margin 300 ms = bound %d ms)", recovery,
         timeout, kTickMs, bound);
}

// ---------------------------------------------------------------------------
// 3. Every waiter wakes at once? 1,000 waiters, releases one by one.
TEST(Stories, S3_ThousandWaitersOneWakesPerRelease) {
  ZkServer zk;  // own server: its mntr counters see only this story
  zk.start();
  const std::string lock = test::unique_path("story3");
  constexpr int kProcesses = 10, kPerProcess = 100, kWaiters = kProcesses * kPerProcess;

  auto gate = start_ready(config("G", zk.connect_string(), lock, {}, 4000));
  gate.send("acquire");
  gate.expect("acquired", 10000ms);
  auto probe = ZkHandle::connect(zk.connect_string());

  std::vector<StoryWorker> ws;
  for (int p = 0; p < kProcesses; ++p) {
    auto c = config("P" + std::to_string(p), zk.connect_string(), lock, {}, 4000);
    c.waiters = kPerProcess;
    ws.push_back(StoryWorker::start(c));
  }
  for (auto& w : ws) w.expect("queued", 30000ms);
  wait_queue_size(probe, lock, kWaiters + 1, 60000ms);
  for (auto& w : ws) EXPECT_FALSE(w.saw("acquired")) << w.history();

  long max_rss_queued = 0;
  for (auto& w : ws) max_rss_queued = std::max(max_rss_queued, rss_kb(w.pid()));
  const auto before = zk.mntr();
  const auto watches_at_peak = before.counter("zk_watch_count").value_or(-1);

  const auto t0 = mono_us();
  gate.send("release");
  gate.expect("releasing", 5000ms);
  // Pump every worker's output until all have released everything.
  auto deadline = test::Clock::now() + 120000ms;
  auto all_done = [&] {
    return std::all_of(ws.begin(), ws.end(), [](const StoryWorker& w) { return w.saw("exiting"); });
  };
  long max_rss_running = 0;
  while (!all_done()) {
    ASSERT_LT(test::Clock::now(), deadline) << "releases did not finish";
    bool progressed = false;
    for (auto& w : ws) {
      while (w.next(0ms)) progressed = true;
    }
    for (auto& w : ws) max_rss_running = std::max(max_rss_running, rss_kb(w.pid()));
    if (!progressed) ::usleep(5000);
  }
  const double elapsed_ms = ms_between(t0, mono_us());
  const auto after = zk.mntr();

  // Exactly one acquisition per release, in FIFO (token) order.
  struct Hold {
    FencingToken token;
    std::int64_t acquired = 0, releasing = 0;
    std::string process;
  };
  std::vector<Hold> holds;
  {
    const auto& g = gate.events();
    Hold h;
    h.process = gate.name();
    for (auto& e : g) {
      if (e.kind == "acquired") h.token = token_of(e), h.acquired = e.t_us;
      if (e.kind == "releasing") h.releasing = e.t_us;
    }
    holds.push_back(h);
  }
  int failures = 0;
  for (auto& w : ws) {
    std::map<std::string, Hold> by_idx;
    for (auto& e : w.events()) {
      if (e.kind == "acquired") by_idx[e.get("idx")].token = token_of(e), by_idx[e.get("idx")].acquired = e.t_us;
      if (e.kind == "releasing") by_idx[e.get("idx")].releasing = e.t_us;
      if (e.kind == "acquire_failed") ++failures;
    }
    for (auto& [idx, h] : by_idx) {
      h.process = w.name();
      holds.push_back(h);
    }
  }
  EXPECT_EQ(failures, 0);
  ASSERT_EQ(holds.size(), static_cast<std::size_t>(kWaiters + 1));
  std::sort(holds.begin(), holds.end(), [](const Hold& a, const Hold& b) { return a.token < b.token; });
  int out_of_order = 0;
  for (std::size_t i = 1; i < holds.size(); ++i) {
    // Granted only after the previous holder started releasing, and the grant
    // order is the queue order (tokens are creation order).
    if (holds[i].acquired < holds[i - 1].releasing || holds[i].acquired < holds[i - 1].acquired) ++out_of_order;
    EXPECT_GT(holds[i].releasing, 0);
  }
  EXPECT_EQ(out_of_order, 0) << "grants that did not follow exactly one release";

  // Watch notifications per release. Each node deletion fires its owner's own
  // watch and the watch of the one waiter queued right behind it. The server
  // counts watchers per session, so when both are in the same process (one
  // session) that deletion counts one watcher, else two.
  auto delta = [&](const char* key) {
    auto b = before.counter(key), a = after.counter(key);
    if (!a || !b) throw StoryError(std::string("mntr has no ") + key);
    return *a - *b;
  };
  const auto releases = static_cast<std::int64_t>(kWaiters + 1);
  std::int64_t cross_process = 0;  // releases whose successor is in another process
  for (std::size_t i = 1; i < holds.size(); ++i) cross_process += holds[i].process != holds[i - 1].process;
  const auto deleted_watchers = delta("zk_sum_node_deleted_watch_count");
  const auto children_watchers = delta("zk_sum_node_children_watch_count");
  const auto changed_watchers = delta("zk_sum_node_changed_watch_count");
  const auto others_notified = deleted_watchers - releases;  // minus each holder's watch on its own node
  EXPECT_EQ(others_notified, cross_process)
      << "watchers fired on node deletions beyond the owner and its one successor";
  EXPECT_EQ(children_watchers, 0);
  EXPECT_EQ(changed_watchers, 0);

  // Healthy: every worker exits 0, the server answers and has nothing pending.
  for (auto& w : ws) {
    auto st = w.process().wait_exit(20000ms);
    ASSERT_TRUE(st) << w.name() << " did not exit";
    EXPECT_TRUE(st->exited() && st->exit_code() == 0) << w.name() << ": " << st->describe();
  }
  EXPECT_EQ(test::four_letter_word("127.0.0.1", zk.port(), "ruok").value_or(""), "imok");
  // Read once every worker has exited: a session's close may still be in
  // flight when its worker prints "exiting" (1 outstanding was seen once).
  EXPECT_TRUE(eventually([&] { return zk.mntr().counter("zk_outstanding_requests").value_or(-1) == 0; }, 10000ms))
      << "requests still outstanding after every worker exited";
  constexpr long kRssBoundKb = 128 * 1024;
  EXPECT_LT(max_rss_queued, kRssBoundKb);
  EXPECT_LT(max_rss_running, kRssBoundKb);
  const long server_rss = rss_kb(zk.pid());

  report("S3 herd: %d waiters in %d processes, %lld releases in %.0f ms (%.2f ms per hand-off); "
         "watchers fired per release: %.3f = the holder's own + one other session for %lld of %lld releases "
         "(the rest: successor in the same process, or none behind); "
         "children/data watches fired: %lld/%lld; watches at peak %lld; worker RSS max %ld kB queued, %ld kB "
         "running; server RSS %ld kB",
         kWaiters, kProcesses, static_cast<long long>(releases), elapsed_ms, elapsed_ms / static_cast<double>(releases),
         static_cast<double>(deleted_watchers) / static_cast<double>(releases), static_cast<long long>(others_notified),
         static_cast<long long>(releases), static_cast<long long>(children_watchers),
         static_cast<long long>(changed_watchers), static_cast<long long>(watches_at_peak), max_rss_queued,
         max_rss_running, server_rss);
}

// ---------------------------------------------------------------------------
// 4a. The lock service restarts (standalone, within the session timeout).
TEST(Stories, S4_LockServiceRestartsStandalone) {
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

// 4b. One member of a three-server ensemble restarted.
TEST(Stories, S4_EnsembleMemberRestarts) {
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
// 5. A client abandons its wait.
TEST(Stories, S5_ClientAbandonsWait) {
  auto& zk = test::shared_server();
  const std::string lock = test::unique_path("story5");
  auto probe = ZkHandle::connect(zk.connect_string());
  auto a = start_ready(config("A", zk.connect_string(), lock));
  auto b = start_ready(config("B", zk.connect_string(), lock));
  auto c = start_ready(config("C", zk.connect_string(), lock));
  a.send("acquire");
  a.expect("acquired", 10000ms);
  b.send("acquire");
  wait_queue_size(probe, lock, 2);
  c.send("acquire");
  wait_queue_size(probe, lock, 3);
  const std::string b_node = lock + "/" + queue_of(probe, lock)[1].name;

  // (a) B is killed mid-wait: its node goes with its session.
  const auto killed_at = mono_us();
  b.signal(SIGKILL);
  ASSERT_TRUE(eventually([&] { return !node_exists(probe, b_node); }, 10000ms)) << "dead waiter's node stayed";
  const double gone_ms = ms_between(killed_at, mono_us());
  EXPECT_FALSE(c.saw("acquired"));
  a.send("release");
  const auto acq_c = c.expect("acquired", 10000ms);

  // (b) D's stop_token fires mid-wait: its node is deleted at once.
  auto d = start_ready(config("D", zk.connect_string(), lock));
  auto e = start_ready(config("E", zk.connect_string(), lock));
  d.send("acquire");
  wait_queue_size(probe, lock, 2);
  e.send("acquire");
  wait_queue_size(probe, lock, 3);
  const std::string d_node = lock + "/" + queue_of(probe, lock)[1].name;
  const auto cancelled_at = mono_us();
  d.send("cancel");
  const auto failed = d.expect("acquire_failed", 5000ms);
  EXPECT_EQ(failed.get("code"), "cancelled");
  ASSERT_TRUE(eventually([&] { return !node_exists(probe, d_node); }, 5000ms)) << "cancelled waiter's node stayed";
  const double cancel_ms = ms_between(cancelled_at, mono_us());
  c.send("release");
  const auto acq_e = e.expect("acquired", 10000ms);
  EXPECT_GT(token_of(acq_e), token_of(acq_c));
  EXPECT_FALSE(d.saw("acquired"));

  report("S5 abandon: killed waiter's node gone after %.0f ms (session timeout 1000 ms), the waiter behind it "
         "was granted on the next release; cancelled waiter's node gone after %.0f ms, the waiter behind it moved up",
         gone_ms, cancel_ms);
}

// ---------------------------------------------------------------------------
// 6. Quorum is lost.
TEST(Stories, S6_QuorumLost) {
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

// ---------------------------------------------------------------------------
// 7. A lease expires while its holder believes it is alive, seen from the
// resource: the fenced store (exit 65 and its message to the client) and a
// FenceGate service (a rejection logged for the operator).
TEST(Stories, S7_StaleLeaseRejectedByResource) {
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
// 8. Two lock services against one resource.
TEST(Stories, S8_TwoLockServicesOneResource) {
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

// ---------------------------------------------------------------------------
// 9. Renewal from a frozen process.
TEST(Stories, S9_RenewalFromFrozenProcess) {
  auto& zk = test::shared_server();
  const std::string lock = test::unique_path("story9");
  Event ready;
  auto a = start_ready(config("A", zk.connect_string(), lock), &ready);
  auto probe = ZkHandle::connect(zk.connect_string());
  a.send("acquire");
  const auto acq = a.expect("acquired", 10000ms);
  const std::string node = acq.get("node"), session = ready.get("session");

  const auto frozen_at = mono_us();
  a.signal(SIGSTOP);
  // The server expires the session while the process is frozen.
  ASSERT_TRUE(eventually([&] { return !node_exists(probe, node); }, 10000ms));
  const double expired_ms = ms_between(frozen_at, mono_us());
  const auto resumed_at = mono_us();
  a.signal(SIGCONT);

  // On resume the client tries its old session, is told it expired, and
  // starts a new one; the lease stays lost.
  const auto lost_state = a.expect("state", 10000ms, [](const Event& e) { return e.has("s", "lost"); });
  const auto fresh = a.expect("state", 10000ms, [](const Event& e) { return e.has("s", "connected"); });
  const auto lost = a.expect("lost", 5000ms);
  EXPECT_NE(fresh.get("session"), session);
  EXPECT_EQ(fresh.get("epoch"), "2");
  a.send("check");
  const auto chk = a.expect("check", 5000ms);
  EXPECT_EQ(chk.get("valid"), "0");
  EXPECT_NE(chk.get("loss"), "none");
  EXPECT_FALSE(node_exists(probe, node)) << "the old node came back";
  // No trace of the old session on the server: it was not renewed.
  const auto cons = test::four_letter_word("127.0.0.1", zk.port(), "cons").value_or("");
  EXPECT_EQ(cons.find("sid=" + session), std::string::npos) << cons;
  // ... and it owns no ephemeral node ("dump": the section from "Sessions
  // with Ephemerals" up to "Connections dump"). The connections section may
  // still list the old socket until the server's connection expiry reaps it;
  // that is a dead TCP connection, not a session, so it is not searched.
  const auto dump = test::four_letter_word("127.0.0.1", zk.port(), "dump").value_or("");
  const auto eph = dump.find("Sessions with Ephemerals");
  ASSERT_NE(eph, std::string::npos) << dump;
  const auto conns = dump.find("Connections dump", eph);
  const auto eph_section = dump.substr(eph, conns == std::string::npos ? std::string::npos : conns - eph);
  EXPECT_EQ(eph_section.find(session), std::string::npos) << dump;

  report("S9 frozen renewal: session %s expired %.0f ms into the freeze (timeout %s ms); on resume: state lost "
         "after %.0f ms, lease lost (%s), new session %s; old node gone, old session unknown to the server",
         session.c_str(), expired_ms, ready.get("timeout").c_str(), ms_between(resumed_at, lost_state.t_us),
         lost.get("reason").c_str(), fresh.get("session").c_str());
}

}  // namespace
}  // namespace zklock::stories
