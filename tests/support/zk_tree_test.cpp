// zk_tree.hpp on a real server: a subtree of several levels, with
// containers, ephemerals and sequential nodes, is listed whole and deleted
// to the last node, and nothing beside or above it is touched.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "zk_harness.hpp"
#include "zk_tree.hpp"

namespace zklock::test {
namespace {

using namespace std::chrono_literals;

TEST(ZkTree, DeleteSubtreeLeavesNothingBelowTheRootAndTouchesNothingElse) {
  auto zk = ZkHandle::connect(shared_server().connect_string());
  const auto parent = unique_path("zk-tree");
  const auto root = parent + "/run", sibling = parent + "/other";
  zk.ensure(parent);
  zk.ensure(root);
  zk.ensure(sibling);
  std::size_t planted = 1;  // root
  for (int d = 0; d < 5; ++d) {
    const auto dir = root + "/d" + std::to_string(d);
    ASSERT_EQ(zk.create(dir, "", ZOO_CONTAINER), ZOK);
    ++planted;
    for (int l = 0; l < 40; ++l) {
      const auto lock = dir + "/l" + std::to_string(l);
      ASSERT_EQ(zk.create(lock, "", ZOO_CONTAINER), ZOK);
      ASSERT_EQ(zk.create(lock + "/x-", "data", l % 2 ? ZOO_EPHEMERAL_SEQUENTIAL : ZOO_PERSISTENT_SEQUENTIAL), ZOK);
      planted += 2;
    }
  }

  const auto listing = list_tree(zk.get(), root, 30s, 16);
  ASSERT_TRUE(listing.complete);
  EXPECT_EQ(listing.paths.size(), planted);
  EXPECT_EQ(listing.paths.front(), root);
  EXPECT_EQ(*std::max_element(listing.depth.begin(), listing.depth.end()), 3u);

  const auto d = delete_subtree(zk.get(), root, 30s, 16);
  EXPECT_TRUE(d.complete()) << d.failed << " not deleted";
  EXPECT_EQ(d.deleted + d.gone, planted);
  EXPECT_EQ(zk.exists(root), ZNONODE);
  EXPECT_EQ(zk.exists(sibling), ZOK);
  EXPECT_EQ(zk.exists(parent), ZOK);

  // A second pass finds nothing: a missing root is not an error.
  const auto again = delete_subtree(zk.get(), root, 30s);
  EXPECT_TRUE(again.complete());
  EXPECT_EQ(again.deleted + again.gone, 0u);
  EXPECT_TRUE(list_tree(zk.get(), root).paths.empty());
  ASSERT_EQ(delete_subtree(zk.get(), parent).failed, 0u);
}

}  // namespace
}  // namespace zklock::test
