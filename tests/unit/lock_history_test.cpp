// LockHistoryTable: what a client's last exclusive acquisition of each lock
// found (MachineConfig::history). Pure: no server.
#include "lock_history.hpp"

#include <gtest/gtest.h>

#include <string>

namespace zklock::detail {
namespace {

TEST(LockHistoryTable, UnknownUntilRememberedThenTheLatest) {
  LockHistoryTable t;
  EXPECT_EQ(t.seen_before("/locks/a"), LockHistory::unknown);
  t.remember("/locks/a", false);
  EXPECT_EQ(t.seen_before("/locks/a"), LockHistory::free);
  t.remember("/locks/a", true);
  EXPECT_EQ(t.seen_before("/locks/a"), LockHistory::contended);
  EXPECT_EQ(t.seen_before("/locks/b"), LockHistory::unknown);
}

// Bounded: past kMaxLocks locks everything is forgotten (a hint only), but
// re-remembering a known lock forgets nothing.
TEST(LockHistoryTable, ForgetsWholesalePastItsBound) {
  LockHistoryTable t;
  for (std::size_t i = 0; i < LockHistoryTable::kMaxLocks; ++i) t.remember("/locks/" + std::to_string(i), true);
  t.remember("/locks/0", false);
  EXPECT_EQ(t.seen_before("/locks/0"), LockHistory::free);
  EXPECT_EQ(t.seen_before("/locks/1"), LockHistory::contended);
  t.remember("/locks/new", true);
  EXPECT_EQ(t.seen_before("/locks/1"), LockHistory::unknown);
  EXPECT_EQ(t.seen_before("/locks/new"), LockHistory::contended);
}

}  // namespace
}  // namespace zklock::detail
