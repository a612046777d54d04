// A multi on a handle whose session has expired, against a real server.
//
// zoo_amulti frees the first sub-request's path when a later one cannot be
// prepared on an unrecoverable handle (lib/src/multi_request.hpp). A holder
// frozen past its session aborted that way ("double free"), removing its node with
// the marker's two-op multi. issue_multi() must refuse such a request
// without calling zoo_amulti, and leave every path the request owns intact.
// Without the guard, the request's destructor frees a path the C client
// already freed: glibc aborts the binary, ASan reports a double free.
#include "multi_request.hpp"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>

#include "fault_proxy.hpp"
#include "zk_harness.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;

void never_completes(int, const void* data) noexcept {
  static_cast<std::atomic<int>*>(const_cast<void*>(data))->fetch_add(1);
}

TEST(ExpiredMulti, IsRefusedWithoutZooAmultiAndThePathsStayTheRequests) {
  auto& zk = test::shared_server();
  test::FaultProxy proxy(zk.port());
  auto h = test::ZkHandle::connect(proxy.connect_string(), 1000ms);
  auto probe = test::ZkHandle::connect(zk.connect_string());
  const std::string node = test::unique_path("expired-multi");
  ASSERT_EQ(h.create(node, "", ZOO_EPHEMERAL), ZOK);

  // Kept away from the server until it expires the session (its ephemeral
  // node goes), then let back: the reconnect is told "expired".
  proxy.blackhole(true);
  ASSERT_TRUE(test::eventually([&] { return probe.exists(node) == ZNONODE; }, 15s))
      << "the server never expired the session";
  proxy.blackhole(false);
  proxy.cut();
  ASSERT_TRUE(test::eventually([&] { return h.state() == ZOO_EXPIRED_SESSION_STATE; }, 15s))
      << "state " << h.state();

  std::atomic<int> completed{0};
  {
    MultiRequest req({Op::remove(node + "/w_1"), Op::set_data(node, "w_1"), Op::check(node)},
                     &ZOO_OPEN_ACL_UNSAFE);
    EXPECT_EQ(issue_multi(h.get(), req.call(), never_completes, &completed), ZINVALIDSTATE);
    EXPECT_FALSE(req.c_paths_given_up);  // zoo_amulti was never called: the request frees its paths
    EXPECT_STREQ(req.c_paths[0].get(), (node + "/w_1").c_str());
    EXPECT_STREQ(req.c_paths[1].get(), node.c_str());
  }  // the destructor frees each path once
  EXPECT_EQ(completed.load(), 0);
}

TEST(ExpiredMulti, APathTheCClientRejectsIsRefusedBeforeZooAmulti) {
  auto& zk = test::shared_server();
  auto h = test::ZkHandle::connect(zk.connect_string());
  const std::string node = test::unique_path("bad-multi");
  ASSERT_EQ(h.create(node, "v", 0), ZOK);
  std::atomic<int> completed{0};
  {
    // The bad path first: with zoo_amulti, the second sub-request would free it.
    MultiRequest req({Op::remove(node + "//w_1"), Op::set_data(node, "x")}, &ZOO_OPEN_ACL_UNSAFE);
    EXPECT_EQ(issue_multi(h.get(), req.call(), never_completes, &completed), ZBADARGUMENTS);
    EXPECT_FALSE(req.c_paths_given_up);
  }
  EXPECT_EQ(completed.load(), 0);
  EXPECT_EQ(h.exists(node), ZOK);  // nothing was sent
}

}  // namespace
}  // namespace zklock
