// The C client's path rule, as issue_multi() applies it before zoo_amulti
// (multi_request.hpp: a sub-request zoo_amulti cannot prepare makes it free
// a pointer it does not own, so none is handed to it).
#include "multi_request.hpp"

#include <gtest/gtest.h>

namespace zklock {
namespace {

TEST(CClientPathRule, AcceptsWhatIsValidPathAccepts) {
  for (const char* p : {"/", "/a", "/a/b", "/a.b", "/...", "/.x", "/a/..b", "/w_1_0000000001", "/\x1f", "/\xc3\xa9"}) {
    EXPECT_TRUE(c_client_accepts_path(p, 0)) << p;
  }
}

TEST(CClientPathRule, RejectsWhatIsValidPathRejects) {
  for (const char* p : {"", "a", "a/b", "//", "/a//b", "/a/", "/.", "/..", "/a/./b", "/a/../b", "/a/.", "/a\x01", "/\x1e"}) {
    EXPECT_FALSE(c_client_accepts_path(p, 0)) << p;
  }
  EXPECT_FALSE(c_client_accepts_path(nullptr, 0));
}

TEST(CClientPathRule, ASequentialCreateMayEndInSlashOrDots) {
  // The server appends the sequence number: "/a/" becomes "/a/0000000001".
  for (const char* p : {"/a/", "/a/.", "/a/.."}) {
    EXPECT_TRUE(c_client_accepts_path(p, ZOO_PERSISTENT_SEQUENTIAL)) << p;
    EXPECT_TRUE(c_client_accepts_path(p, ZOO_EPHEMERAL_SEQUENTIAL)) << p;
    EXPECT_FALSE(c_client_accepts_path(p, ZOO_EPHEMERAL)) << p;
  }
  EXPECT_FALSE(c_client_accepts_path("/a//", ZOO_PERSISTENT_SEQUENTIAL));
  EXPECT_FALSE(c_client_accepts_path("/./b", ZOO_PERSISTENT_SEQUENTIAL));
}

TEST(MultiRequestShape, ItsSubRequestsPointToItsOwnCopiesOfThePaths) {
  MultiRequest req({Op::remove("/a/w_1", 3), Op::set_data("/a", "w_1"), Op::check("/b"),
                    Op::create("/c/", "x", CreateMode::persistent_sequential)},
                   &ZOO_OPEN_ACL_UNSAFE);
  ASSERT_EQ(req.zops.size(), 4u);
  EXPECT_STREQ(req.zops[0].delete_op.path, "/a/w_1");
  EXPECT_EQ(req.zops[0].delete_op.version, 3);
  EXPECT_STREQ(req.zops[1].set_op.path, "/a");
  EXPECT_STREQ(req.zops[2].check_op.path, "/b");
  EXPECT_STREQ(req.zops[3].create_op.path, "/c/");
  EXPECT_EQ(req.zops[3].create_op.flags, ZOO_PERSISTENT_SEQUENTIAL);
  for (std::size_t i = 0; i < req.ops.size(); ++i) {
    EXPECT_NE(static_cast<const void*>(req.c_paths[i].get()), static_cast<const void*>(req.ops[i].path.c_str())) << i;
  }
}

}  // namespace
}  // namespace zklock
