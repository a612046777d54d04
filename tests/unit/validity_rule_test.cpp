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

// tickTime 200 ms (ping gap 150 ms), timeout 2 s, margin 200 ms: period 412.5 ms.
ValidityParams params() { return ValidityParams{2000ms, 200ms, 200ms}; }
TP at(int ms) { return TP(std::chrono::milliseconds(ms)) + 1h; }

TEST(ValidityRule, ParamsOfTheProof) {
  const auto p = params();
  EXPECT_EQ(p.ping_gap(), 150ms);
  EXPECT_EQ(p.heartbeat_period(), 412500us);
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
  EXPECT_FALSE(r.committed(1, at(0), at(5)));
  EXPECT_FALSE(r.committed(1, at(700), at(705)));
}

TEST(ValidityRule, AChainOfThreeProvesTheFirstSendTime) {
  ValidityRule r(params());
  EXPECT_FALSE(r.committed(1, at(0), at(5)));      // i
  EXPECT_FALSE(r.committed(1, at(155), at(160)));  // j: sent a ping gap after i's answer
  const auto b = r.committed(1, at(160), at(170));  // k: sent once j was answered
  ASSERT_TRUE(b);
  EXPECT_EQ(*b, at(0) + 2000ms - 200ms);
}

TEST(ValidityRule, JSentTooSoonAfterIsAnswerProvesNothingAboutI) {
  ValidityRule r(params());
  r.committed(1, at(0), at(5));
  r.committed(1, at(154), at(160));  // 149 ms after i's answer: no ping need have fallen between
  EXPECT_FALSE(r.committed(1, at(160), at(170)));
}

TEST(ValidityRule, KPipelinedBehindJProvesNothing) {
  ValidityRule r(params());
  r.committed(1, at(0), at(5));
  // k was sent before j's answer: it may have left our server ahead of the
  // ping reply that carries i's touch.
  r.committed(1, at(200), at(210));
  EXPECT_FALSE(r.committed(1, at(205), at(212)));
  // A later write sent after j's answer completes the chain.
  EXPECT_EQ(r.committed(1, at(211), at(215)), at(0) + 1800ms);
}

TEST(ValidityRule, ANewConnectionStartsOver) {
  ValidityRule r(params());
  r.committed(1, at(0), at(5));
  r.committed(1, at(200), at(205));
  EXPECT_FALSE(r.committed(2, at(300), at(305)));  // the new server's stream: no i, no j yet
  EXPECT_EQ(r.latest_sent(), at(300));
  r.committed(2, at(500), at(505));
  EXPECT_EQ(r.committed(2, at(600), at(605)), at(300) + 1800ms);
}

TEST(ValidityRule, RefusedSettingsProveNothing) {
  ValidityRule r(ValidityParams{2000ms, 1300ms, 200ms});
  for (int t = 0; t < 5000; t += 500) EXPECT_FALSE(r.committed(1, at(t), at(t + 5)));
}

// The heartbeat alone, one write per period: the bound rises on every answer
// and stays ahead of the present by more than a period.
TEST(ValidityRule, HeartbeatsAloneKeepTheBoundAhead) {
  const auto p = params();
  const auto period = std::chrono::duration_cast<std::chrono::milliseconds>(p.heartbeat_period()).count();
  ValidityRule r(p);
  std::optional<TP> bound;
  for (int n = 0; n < 50; ++n) {
    const int sent = static_cast<int>(n * period);
    if (auto b = r.committed(1, at(sent), at(sent + 20))) bound = std::max(bound.value_or(*b), *b);
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
  std::optional<TP> bound;
  for (int t = 0; t < 20000; t += 2) {
    if (auto b = r.committed(1, at(t), at(t + 3))) bound = std::max(bound.value_or(*b), *b);
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
