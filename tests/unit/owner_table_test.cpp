// OwnerTable: one live attempt per owner and lock, and invariant (6) of the
// lock shell: an owner that acquires keeps no idle retained node. Pure: no
// server; the attempts are plain ints.
#include "owner_table.hpp"

#include <gtest/gtest.h>

#include <memory>
#include <string>

namespace zklock::detail {
namespace {

using Table = OwnerTable<int>;

TEST(OwnerTable, OneLiveAttemptPerOwnerAndLock) {
  Table t;
  EXPECT_TRUE(t.enter("/locks/a", "alice"));
  EXPECT_FALSE(t.enter("/locks/a", "alice"));  // would wait for itself
  EXPECT_TRUE(t.enter("/locks/a", "bob"));
  EXPECT_TRUE(t.enter("/locks/b", "alice"));
  t.leave("/locks/a", "alice");
  EXPECT_TRUE(t.enter("/locks/a", "alice"));
}

TEST(OwnerTable, AnOwnerThatAcquiresMayNotListAnIdleNode) {
  Table t;
  auto idle = std::make_shared<int>(1);
  t.begin_acquiring("alice");
  EXPECT_FALSE(t.list_idle("alice", idle));
  EXPECT_TRUE(t.list_idle("bob", idle));  // another owner's rule is its own
  t.end_acquiring("alice");
  EXPECT_TRUE(t.list_idle("alice", idle));
}

TEST(OwnerTable, AnAcquisitionTakesTheOwnersIdleAttemptsOut) {
  Table t;
  auto a = std::make_shared<int>(1), b = std::make_shared<int>(2);
  ASSERT_TRUE(t.list_idle("alice", a));
  ASSERT_TRUE(t.list_idle("alice", b));
  const auto taken = t.begin_acquiring("alice");
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].lock(), a);
  EXPECT_EQ(taken[1].lock(), b);
  t.end_acquiring("alice");
  EXPECT_TRUE(t.begin_acquiring("alice").empty());  // no longer listed
}

TEST(OwnerTable, UnlistingRemovesOnlyThatAttemptAndExpiredOnes) {
  Table t;
  auto a = std::make_shared<int>(1), b = std::make_shared<int>(2);
  auto gone = std::make_shared<int>(3);
  ASSERT_TRUE(t.list_idle("alice", a));
  ASSERT_TRUE(t.list_idle("alice", gone));
  ASSERT_TRUE(t.list_idle("alice", b));
  gone.reset();
  t.unlist_idle("alice", a);
  const auto taken = t.begin_acquiring("alice");
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].lock(), b);
}

TEST(OwnerTable, CountsNestAcrossConcurrentAcquisitions) {
  Table t;
  auto idle = std::make_shared<int>(1);
  t.begin_acquiring("alice");
  t.begin_acquiring("alice");
  t.end_acquiring("alice");
  EXPECT_FALSE(t.list_idle("alice", idle));  // one still under way
  t.end_acquiring("alice");
  EXPECT_TRUE(t.list_idle("alice", idle));
}

// Past kMaxOwners, owners with nothing counted or listed are forgotten; an
// owner with an idle attempt or an acquisition under way is kept.
TEST(OwnerTable, ForgetsOnlyEmptyOwnersWhenFull) {
  Table t;
  auto idle = std::make_shared<int>(1);
  ASSERT_TRUE(t.list_idle("keeper", idle));
  t.begin_acquiring("busy");
  for (std::size_t i = 0; i < Table::kMaxOwners + 10; ++i) {
    const auto owner = "thread-" + std::to_string(i);
    t.begin_acquiring(owner);
    t.end_acquiring(owner);
  }
  EXPECT_FALSE(t.list_idle("busy", idle));  // still counted as acquiring
  const auto taken = t.begin_acquiring("keeper");
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].lock(), idle);
}

}  // namespace
}  // namespace zklock::detail
