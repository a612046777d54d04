// The validity rule (lib/src/validity_rule.hpp) without ZooKeeper: which chains
// of committed writes raise the bound, which do not, and which answer codes
// count as committed at all (quorum_committed).
#include "validity_rule.hpp"

#include <gtest/gtest.h>

#include <initializer_list>

#include "async_op.hpp"

namespace zklock::detail {
namespace {

using namespace std::chrono_literals;
using TP = ValidityRule::time_point;

// tickTime 200 ms (ping gap 150 ms, expiry stall 50 ms), timeout 2 s, margin
// 200 ms: period 412.5 ms.
ValidityParams params() { return ValidityParams{2000ms, 200ms, 200ms}; }
TP at(int ms) { return TP(std::chrono::milliseconds(ms)) + 1h; }
// The bound the caller holds in the tests below that are not about the
// anchor: the session's first, asked for at 0, ahead of every answer there.
const std::optional<TP> kHeld = at(1800);

TEST(ValidityRule, ParamsOfTheProof) {
  const auto p = params();
  EXPECT_EQ(p.ping_gap(), 150ms);
  EXPECT_EQ(p.heartbeat_period(), 412500us);
  EXPECT_EQ(p.expiry_stall(), 50ms);
  EXPECT_TRUE(p.usable());
  // timeout − margin must be at least two ping gaps (1.5 × tickTime).
  EXPECT_TRUE((ValidityParams{2000ms, 1200ms, 200ms}.usable()));   // 1800 >= 1800
  EXPECT_FALSE((ValidityParams{2000ms, 1300ms, 200ms}.usable()));  // 1800 < 1950
  EXPECT_FALSE((ValidityParams{2000ms, 0ms, 200ms}.usable()));     // tickTime unknown
}

// The old pairing: two committed answers a heartbeat period apart. The ping
// that carries the first one's touch may reach our server only after the
// second left it (a delayed leader→follower stream), and then be lost with
// a cut: no bound from the pair.
TEST(ValidityRule, APairIsNoEvidence) {
  ValidityRule r(params());
  EXPECT_FALSE(r.committed(1, at(0), at(5), kHeld));
  EXPECT_FALSE(r.committed(1, at(700), at(705), kHeld));
}

TEST(ValidityRule, AChainOfThreeProvesTheFirstSendTime) {
  ValidityRule r(params());
  EXPECT_FALSE(r.committed(1, at(0), at(5), kHeld));      // i
  EXPECT_FALSE(r.committed(1, at(155), at(160), kHeld));  // j: sent a ping gap after i's answer
  const auto b = r.committed(1, at(160), at(170), kHeld);  // k: sent once j was answered
  ASSERT_TRUE(b);
  EXPECT_EQ(*b, at(0) + 2000ms - 200ms);
}

TEST(ValidityRule, JSentTooSoonAfterIsAnswerProvesNothingAboutI) {
  ValidityRule r(params());
  r.committed(1, at(0), at(5), kHeld);
  r.committed(1, at(154), at(160), kHeld);  // 149 ms after i's answer: no ping need have fallen between
  EXPECT_FALSE(r.committed(1, at(160), at(170), kHeld));
}

TEST(ValidityRule, KPipelinedBehindJProvesNothing) {
  ValidityRule r(params());
  r.committed(1, at(0), at(5), kHeld);
  // k was sent before j's answer: it may have left our server ahead of the
  // ping reply that carries i's touch.
  r.committed(1, at(200), at(210), kHeld);
  EXPECT_FALSE(r.committed(1, at(205), at(212), kHeld));
  // A later write sent after j's answer completes the chain.
  EXPECT_EQ(r.committed(1, at(211), at(215), kHeld), at(0) + 1800ms);
}

TEST(ValidityRule, ANewConnectionStartsOver) {
  ValidityRule r(params());
  r.committed(1, at(0), at(5), kHeld);
  r.committed(1, at(200), at(205), kHeld);
  EXPECT_FALSE(r.committed(2, at(300), at(305), kHeld));  // the new server's stream: no i, no j yet
  EXPECT_EQ(r.latest_sent(), at(300));
  r.committed(2, at(500), at(505), kHeld);
  EXPECT_EQ(r.committed(2, at(600), at(605), kHeld), at(300) + 1800ms);
}

TEST(ValidityRule, RefusedSettingsProveNothing) {
  ValidityRule r(ValidityParams{2000ms, 1300ms, 200ms});
  for (int t = 0; t < 5000; t += 500) EXPECT_FALSE(r.committed(1, at(t), at(t + 5), kHeld));
}

// 3.8.0's expiry thread polls an expired session off its queue and marks it
// closing only afterwards, outside the tracker's lock: a touch and a write
// in between pass, and the session is closed anyway. A chain whose k came
// back after the bound passed may be such a one; it proves its bound only
// once a write sent an expiry stall (a quarter tick) after k's answer is
// committed too, which the leader would have refused had it polled the
// session before the touch for i.
TEST(ValidityRule, AChainAnsweredAfterTheBoundPassedNeedsAConfirmingWrite) {
  ValidityRule r(params());
  const std::optional<TP> lapsed = at(100);
  EXPECT_FALSE(r.committed(1, at(0), at(5), lapsed));      // i
  EXPECT_FALSE(r.committed(1, at(155), at(160), lapsed));  // j
  EXPECT_FALSE(r.committed(1, at(200), at(210), lapsed));  // k, answered after the bound passed
  // Sent 49 ms after k's answer: the leader may still be between its poll
  // and its mark.
  EXPECT_FALSE(r.committed(1, at(259), at(265), lapsed));
  EXPECT_EQ(r.committed(1, at(260), at(270), lapsed), at(0) + 1800ms);
}

// A session without any bound (none proven yet) has nothing to anchor a
// chain either: the same confirmation is needed.
TEST(ValidityRule, WithoutABoundOnlyAConfirmedChainCounts) {
  ValidityRule r(params());
  EXPECT_FALSE(r.committed(1, at(0), at(5), std::nullopt));
  EXPECT_FALSE(r.committed(1, at(155), at(160), std::nullopt));
  EXPECT_FALSE(r.committed(1, at(200), at(210), std::nullopt));
  EXPECT_EQ(r.committed(1, at(300), at(310), std::nullopt), at(0) + 1800ms);
}

// Held means k came back strictly before the bound passed.
TEST(ValidityRule, AChainHeldUntilTheLastInstant) {
  ValidityRule held(params());
  held.committed(1, at(0), at(5), at(171));
  held.committed(1, at(155), at(160), at(171));
  EXPECT_EQ(held.committed(1, at(160), at(170), at(171)), at(0) + 1800ms);
  ValidityRule late(params());
  late.committed(1, at(0), at(5), at(170));
  late.committed(1, at(155), at(160), at(170));
  EXPECT_FALSE(late.committed(1, at(160), at(170), at(170)));
}

// The confirming write must go the same way as the chain: to the same
// server, whose leader's tracker the chain is about.
TEST(ValidityRule, AConfirmationOnAnotherConnectionCountsForNothing) {
  ValidityRule r(params());
  const std::optional<TP> lapsed = at(100);
  r.committed(1, at(0), at(5), lapsed);
  r.committed(1, at(155), at(160), lapsed);
  EXPECT_FALSE(r.committed(1, at(200), at(210), lapsed));
  EXPECT_FALSE(r.committed(2, at(400), at(405), lapsed));
  EXPECT_FALSE(r.committed(2, at(600), at(605), lapsed));
}

// The heartbeat alone, one write per period: the bound rises on every answer
// and stays ahead of the present by more than a period.
TEST(ValidityRule, HeartbeatsAloneKeepTheBoundAhead) {
  const auto p = params();
  const auto period = std::chrono::duration_cast<std::chrono::milliseconds>(p.heartbeat_period()).count();
  ValidityRule r(p);
  std::optional<TP> bound = kHeld;  // kept as the library keeps it: the largest proven
  for (int n = 0; n < 50; ++n) {
    const int sent = static_cast<int>(n * period);
    if (auto b = r.committed(1, at(sent), at(sent + 20), bound)) bound = std::max(*bound, *b);
    if (n >= 3) {
      ASSERT_TRUE(bound);
      // Until the next heartbeat is answered, the bound must not lapse.
      EXPECT_GT(*bound, at(sent + static_cast<int>(period) + 20)) << "heartbeat " << n;
    }
  }
}

// A session with far more committed writes than fit in the kept answers: the
// bound keeps rising (the old pairing rule once stopped raising it under load).
TEST(ValidityRule, ABusySessionKeepsItsBoundRising) {
  ValidityRule r(params());
  std::optional<TP> bound = kHeld;
  for (int t = 0; t < 20000; t += 2) {
    if (auto b = r.committed(1, at(t), at(t + 3), bound)) bound = std::max(*bound, *b);
    if (t > 1000) {
      ASSERT_TRUE(bound);
      EXPECT_GT(*bound, at(t + 1000)) << t;
    }
  }
  EXPECT_LE(r.kept(), ValidityRule::kMaxKept);
}

}  // namespace
}  // namespace zklock::detail

namespace zklock {
namespace {

TEST(QuorumCommitted, OnlyCodesTheLeaderCommitted) {
  for (int rc : std::initializer_list<int>{ZOK, ZNONODE, ZNODEEXISTS, ZBADVERSION, ZNOTEMPTY, ZNOCHILDRENFOREPHEMERALS}) {
    EXPECT_TRUE(quorum_committed(rc)) << rc;
  }
  // Produced by a server alone (throttled, read-only, eager ACL check), by the
  // C client, or fatal to the session: never evidence.
  for (int rc : std::initializer_list<int>{ZTHROTTLEDOP, ZNOTREADONLY, ZNOAUTH, ZCONNECTIONLOSS, ZOPERATIONTIMEOUT, ZSESSIONEXPIRED,
                 ZSESSIONMOVED, ZINVALIDSTATE, ZSYSTEMERROR, ZMARSHALLINGERROR, ZCLOSING, ZAUTHFAILED,
                 ZBADARGUMENTS, ZRUNTIMEINCONSISTENCY, ZAPIERROR, -999}) {
    EXPECT_FALSE(quorum_committed(rc)) << rc;
  }
}

}  // namespace
}  // namespace zklock
