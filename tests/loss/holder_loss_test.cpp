// Holders and waiters lost as processes: real zklock_test_worker story
// processes against the shared ZooKeeper server, frozen (SIGSTOP) past
// their session, killed outright, or abandoning their wait, with writes
// through the real fenced-store. Each test asserts the outcome and prints
// the figure it measured ("[story] ..." lines).
//
// Workers use 1 s session timeouts, so the set runs in well under a minute.
#include <gtest/gtest.h>

#include <cstdio>
#include <map>

#include "story_support.hpp"

namespace zklock::stories {
namespace {

using test::ZkHandle;

constexpr int kTickMs = 200;  // the shared server's tick

// ---------------------------------------------------------------------------
// The holder frozen past its session timeout: on resume its valid() is false
// before it writes, its write is refused by the store (exit 65), it is told
// the lease is lost, and the store keeps the successor's value.
TEST(HolderLoss, FrozenPastTheSessionTimeoutIsRefusedByTheStoreOnResume) {
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

// The same freeze, seen through the loss reason the holder is given.
//
// When the server expires a frozen holder's session it deletes the ephemeral
// node and sends the holder's own-node watch notification into the
// still-open socket before closing it. On SIGCONT the client may process
// that notification first and try to read a revocation record on a session
// that is gone: the read fails with connection loss, or the C client refuses
// it (invalid_state) on the expired handle. Neither is a verdict: the
// machine leaves it to the session events (validity_expired or
// session_expired) and never reports LossReason::revoked (lock_machine_hold.cpp,
// on_record; lock_attempt_io.cpp, rc_of). On the same resume the lapse
// removes the node with the marker's two-op multi on the expired handle,
// which once aborted the process (lib/src/multi_request.hpp). Both are races
// (about once in a few freezes), so the test freezes up to six times.
TEST(HolderLoss, FrozenPastTheSessionTimeoutIsToldExpiryNotRevocation) {
  auto& zk = test::shared_server();
  auto probe = ZkHandle::connect(zk.connect_string());
  std::map<std::string, int> reasons;
  TempDir dir;
  const std::string db = (dir / "store.db").string();
  for (int round = 0; round < 6; ++round) {
    // Exactly the freeze above: a waiter behind the holder, a write queued for the resume.
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
// The holder killed outright: the waiter is granted within the session
// timeout, a tick and a margin.
TEST(HolderLoss, KilledHolderIsSucceededWithinTheSessionTimeout) {
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
// The holder frozen until the server expires its session: on resume the
// client tries its old session, is told it expired and starts a new one; the
// lease stays lost and the old session is not renewed.
TEST(HolderLoss, FrozenPastExpiryResumesOnANewSessionWithoutRenewingTheOld) {
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

// ---------------------------------------------------------------------------
// A client abandons its wait: a waiter killed mid-wait, and one whose
// stop_token fires; each one's node goes and the waiter behind moves up.
TEST(WaiterLoss, KilledOrCancelledWaiterLeavesTheQueueAndTheNextMovesUp) {
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

}  // namespace
}  // namespace zklock::stories
