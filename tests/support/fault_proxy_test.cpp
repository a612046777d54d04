// The fault proxy's protocol-aware rules, each shown on a real server: one
// notification dropped (and the next passed), a ghost node listed and read
// until cleared (writes still told the truth), and the counts of each.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <string>
#include <vector>

#include "fault_proxy.hpp"
#include "zk_harness.hpp"
#include "zklock/client.hpp"

namespace zklock::test {
namespace {

using namespace std::chrono_literals;

struct Fired {
  std::atomic<int> deleted{0};
};

void watch_deletion(Client& c, const std::string& path, Fired& fired) {
  c.get_async(
      path,
      [&fired](const WatchEvent& e) {
        if (e.type == WatchEvent::Type::deleted) fired.deleted.fetch_add(1);
      },
      [](Status, std::string, const Stat&) {});
}

TEST(FaultProxyWire, DropsTheChosenNotificationAndPassesTheNext) {
  auto& zk = shared_server();
  FaultProxy proxy(zk.port());
  Client c({.connect = proxy.connect_string()});
  Client direct({.connect = zk.connect_string()});
  const auto a = unique_path("proxy-drop-a"), b = unique_path("proxy-drop-b");
  direct.create(a);
  direct.create(b);
  Fired fa, fb;
  watch_deletion(c, a, fa);
  watch_deletion(c, b, fb);
  c.get(a);  // both watches are set: the session's requests are answered in order
  proxy.drop_notification(wire::kDeleted, a);

  direct.remove(a);
  direct.remove(b);
  ASSERT_TRUE(eventually([&] { return fb.deleted.load() == 1; }, 5s)) << "the other notification was held back";
  EXPECT_EQ(fa.deleted.load(), 0) << "the dropped notification arrived";
  const auto counts = proxy.wire_counts();
  EXPECT_EQ(counts.notifications_dropped, 1u);
  EXPECT_GE(counts.notifications_passed, 1u);
  EXPECT_FALSE(c.try_get(a).has_value());  // the node is gone all the same
}

TEST(FaultProxyWire, AGhostIsListedAndReadUntilCleared) {
  auto& zk = shared_server();
  FaultProxy proxy(zk.port());
  Client c({.connect = proxy.connect_string()});
  const auto dir = unique_path("proxy-ghost");
  c.create(dir);
  c.create(dir + "/real");
  proxy.ghost(dir, "ghost");

  for (int i = 0; i < 2; ++i) {
    auto listed = c.children(dir);
    std::sort(listed.begin(), listed.end());
    EXPECT_EQ(listed, (std::vector<std::string>{"ghost", "real"}));
  }
  EXPECT_TRUE(c.try_get(dir + "/ghost").has_value()) << "the ghost's read was not rewritten";
  EXPECT_THROW(c.set_data(dir + "/ghost", "x"), Error) << "a write reached a node the server does not have";
  const auto counts = proxy.wire_counts();
  EXPECT_EQ(counts.listings_rewritten, 2u);
  EXPECT_EQ(counts.reads_rewritten, 1u);

  proxy.clear_ghost();
  EXPECT_EQ(c.children(dir), std::vector<std::string>{"real"});
  EXPECT_FALSE(c.try_get(dir + "/ghost").has_value());
}

}  // namespace
}  // namespace zklock::test
