// Retained leases across a process pause: real worker processes, real
// signals, the real fenced-store. A retained re-take is local (no request),
// so the one thing between a paused retainer and a stale re-take is its
// validity bound; these stories freeze the retainer past its session and
// check that it is not re-granted on wake, and that a write with the token
// it kept is refused by the store.
#include <gtest/gtest.h>

#include "story_support.hpp"

namespace zklock::stories {
namespace {

using test::ZkHandle;

WorkerConfig retainer(const std::string& name, const std::string& connect, const std::string& lock,
                      const std::string& db) {
  WorkerConfig c;
  c.name = name;
  c.connect = connect;
  c.lock = lock;
  c.db = db;
  c.session_timeout_ms = 2000;
  c.retain_ms = 60000;
  // The first re-take below must be local: it follows a write through
  // fenced-store, which a loaded machine under ASan can stretch past the
  // default period (the 2 s session) since the grant's listing confirmed the
  // node. What is told here is the validity bound's part, not the period's
  // (tests/order/watchdog_test.cpp tells that).
  c.wait_check_ms = 30000;
  return c;
}

// A re-takes its retained lock locally (same node, the next lease's token), releases it
// and is frozen while idle. B queues, and is granted once A's session has
// expired. A wakes to two commands queued while it slept: an acquisition
// (its bound has lapsed, so the re-take must not be local: it queues, and
// is granted only after B) and a write with the token it kept, which the
// store refuses because B wrote with a larger one.
TEST(FrozenRetainer, DoesNotReTakeOnWakeAndItsLateWriteIsRefused) {
  auto& zk = test::shared_server();
  TempDir dir;
  const std::string db = (dir / "store.db").string();
  const std::string lock = test::unique_path("retain-freeze");
  auto a = start_ready(retainer("A", zk.connect_string(), lock, db));
  auto b = start_ready(retainer("B", zk.connect_string(), lock, db));
  auto probe = ZkHandle::connect(zk.connect_string());

  a.send("acquire");
  const auto first = a.expect("acquired", 10000ms);
  a.send("write k A-1");
  EXPECT_EQ(a.expect("write", 10000ms).get("rc"), "0");
  a.send("release");
  a.expect("released", 5000ms);
  a.send("acquire");
  const auto again = a.expect("acquired", 5000ms);
  EXPECT_EQ(again.get("node"), first.get("node")) << "not a re-take of the retained node";
  EXPECT_EQ(again.get("token"), first.get("token") + ".1") << "a local re-take: the node's czxid, lease ordinal 1";
  a.send("release");
  a.expect("released", 5000ms);
  ASSERT_EQ(queue_of(probe, lock).size(), 1u) << "the released node is not retained";

  const auto frozen_at = mono_us();
  a.signal(SIGSTOP);
  b.send("acquire");
  const auto granted_b = b.expect("acquired", 15000ms);
  EXPECT_GT(token_of(granted_b), token_of(first));
  EXPECT_GE(ms_between(frozen_at, granted_b.t_us), 1000.0) << "granted before A's 2 s session could expire";
  b.send("write k B-1");
  EXPECT_EQ(b.expect("write", 10000ms).get("rc"), "0");

  a.send("acquire");
  a.send("write-token " + first.get("token") + " k A-late");
  a.signal(SIGCONT);
  const auto late = a.expect("write", 10000ms);
  EXPECT_EQ(late.get("rc"), "65") << late.raw;
  EXPECT_NE(late.get("msg").find("stale"), std::string::npos) << late.raw;
  EXPECT_EQ(store_get(db, "k"), std::optional<std::string>("B-1"));
  // B still holds: A's acquisition waits in the queue (a local re-take
  // would have printed "acquired" with the old token by now).
  std::optional<Event> early;
  try {
    early = a.expect("acquired", 1000ms);
  } catch (const StoryError&) {
  }
  ASSERT_FALSE(early) << "re-granted on wake while B holds: " << early->raw;
  // The wake-time acquisition queued on the old session; it fails when the
  // client learns that the session expired (the usual case), then A asks
  // again on its new session.
  const bool failed = a.saw("acquire_failed");
  b.send("release");
  b.expect("released", 5000ms);
  if (failed) a.send("acquire");
  const auto after = a.expect("acquired", 15000ms);
  EXPECT_GT(token_of(after), token_of(granted_b)) << after.raw;
  EXPECT_NE(after.get("node"), first.get("node"));
  report("retained freeze: A frozen, B granted %.0f ms later (token %s > %s); A's late write refused: %s; "
         "A's wake-time acquisition %s; A re-granted only after B, token %s",
         ms_between(frozen_at, granted_b.t_us), granted_b.get("token").c_str(), first.get("token").c_str(),
         late.get("msg").c_str(), failed ? "failed (session expired)" : "queued", after.get("token").c_str());
}

}  // namespace
}  // namespace zklock::stories
