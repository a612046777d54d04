// The reconnect-loop rule (lib/src/reconnect_loop.hpp), with time as an input.
#include <gtest/gtest.h>

#include "reconnect_loop.hpp"

namespace zklock::detail {
namespace {

constexpr std::chrono::milliseconds kBound{2000};
const Clock::time_point t0{};

TEST(ReconnectLoopRule, ThreeUnansweredConnectionsOverTheBoundAreALoopReportedOnce) {
  ReconnectLoop r;
  EXPECT_FALSE(r.ended(false, t0, t0 + 100ms, kBound));
  EXPECT_FALSE(r.ended(false, t0 + 700ms, t0 + 800ms, kBound));
  EXPECT_FALSE(r.ended(false, t0 + 1400ms, t0 + 1500ms, kBound)) << "three, but within the bound";
  EXPECT_TRUE(r.ended(false, t0 + 2100ms, t0 + 2200ms, kBound));
  EXPECT_EQ(r.streak(), 4u);
  EXPECT_EQ(r.since(), t0);
  EXPECT_FALSE(r.ended(false, t0 + 2800ms, t0 + 2900ms, kBound)) << "reported twice";
}

TEST(ReconnectLoopRule, FewConnectionsFarApartAreALoopOnceThereAreThree) {
  ReconnectLoop r;
  EXPECT_FALSE(r.ended(false, t0, t0 + 10ms, kBound));
  EXPECT_FALSE(r.ended(false, t0 + 10s, t0 + 10010ms, kBound));
  EXPECT_TRUE(r.ended(false, t0 + 20s, t0 + 20010ms, kBound)) << "the third, past the bound";
}

// An idle session (nothing asked, so nothing answered) whose connections
// each stayed up a while, cut by a rolling restart: not refused, no loop.
TEST(ReconnectLoopRule, LongLivedUnansweredConnectionsAreNoLoop) {
  ReconnectLoop r;
  const auto third = kBound / ReconnectLoop::kShortDivisor;
  for (int i = 0; i < 10; ++i) {
    const auto began = t0 + i * 10s;
    EXPECT_FALSE(r.ended(false, began, began + third, kBound)) << i;
    EXPECT_EQ(r.streak(), 0u);
  }
  // One long-lived connection breaks a streak of short ones, too.
  EXPECT_FALSE(r.ended(false, t0 + 100s, t0 + 100s + 10ms, kBound));
  EXPECT_FALSE(r.ended(false, t0 + 101s, t0 + 101s + 10ms, kBound));
  EXPECT_FALSE(r.ended(false, t0 + 102s, t0 + 102s + third, kBound));
  EXPECT_EQ(r.streak(), 0u);
}

TEST(ReconnectLoopRule, AnAnsweredConnectionStartsOver) {
  ReconnectLoop r;
  EXPECT_FALSE(r.ended(false, t0, t0 + 100ms, kBound));
  EXPECT_FALSE(r.ended(false, t0 + 1s, t0 + 1100ms, kBound));
  EXPECT_FALSE(r.ended(true, t0 + 2s, t0 + 2100ms, kBound));
  EXPECT_EQ(r.streak(), 0u);
  EXPECT_FALSE(r.ended(false, t0 + 3s, t0 + 3100ms, kBound));
  EXPECT_FALSE(r.ended(false, t0 + 4s, t0 + 4100ms, kBound));
  EXPECT_FALSE(r.ended(false, t0 + 4500ms, t0 + 4600ms, kBound)) << "the streak began at 3 s";
  EXPECT_TRUE(r.ended(false, t0 + 5s, t0 + 5100ms, kBound));
  EXPECT_EQ(r.since(), t0 + 3s);
}

}  // namespace
}  // namespace zklock::detail
