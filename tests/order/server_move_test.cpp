// A session whose server has diverged leaves it (lib/src/server_move.cpp):
// two fault proxies to one real server stand for two members, one of which
// lists a ghost node at the head of the queue. Each proxy listens at an
// address of its own (127.0.0.2, 127.0.0.3), as members on different hosts
// do: the C client tells servers apart by address, not port.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include "fault_proxy.hpp"
#include "zk_harness.hpp"
#include "zklock/client.hpp"
#include "zklock/fair_mutex.hpp"
#include "zklock/protocol/node_name.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test::eventually;
using test::unique_lock_path;

constexpr auto kPeriod = 1s;  // ClientOptions::wait_check of the waiter

// Once the leader says the head is gone while the session's server still
// lists it, the session's next connection is to the other member — the same
// session, its lease still held — and a later waiter there is not held up
// by the ghost at all.
TEST(ServerMove, ASessionLeavesTheMemberThatListsAGhost) {
  auto& zk = test::shared_server();
  test::FaultProxy diverged(zk.port(), test::FaultProxy::Framing::zookeeper, "127.0.0.2");
  test::FaultProxy healthy(zk.port(), test::FaultProxy::Framing::zookeeper, "127.0.0.3");
  Client direct({.connect = zk.connect_string()});
  // On the diverged member first: the other refuses until the session is up.
  healthy.refuse(true);
  Client waiter_client({.connect = diverged.connect_string() + "," + healthy.connect_string(),
                        .session_timeout = 4s,
                        .wait_check = kPeriod});
  healthy.refuse(false);
  // Counted from here: the Client's start also reads `conf` through them.
  const auto d0 = diverged.connections(), h0 = healthy.connections();
  const auto session = waiter_client.session_id();

  const auto path = unique_lock_path("server-move");
  {
    FairMutex warm(direct, path);  // sequence numbers used up: the ghost orders first
    for (int i = 0; i < 3; ++i) warm.acquire().release();
  }
  const auto ghost = protocol::lock_node_prefix(Mode::exclusive, protocol::owner_key("ghost"),
                                                std::string(32, 'a')) + "0000000000";
  diverged.ghost(path, ghost);
  FairMutex waiting(waiter_client, path);
  auto first = waiting.try_acquire_for(15s);
  ASSERT_TRUE(first.has_value()) << "timed out behind the ghost";
  EXPECT_EQ(waiter_client.diverged_servers_seen(), 1u);

  ASSERT_TRUE(eventually([&] { return healthy.connections() == h0 + 1 && waiter_client.connected(); }, 10s))
      << "the session did not move to the other member (new connections: diverged " << diverged.connections() - d0
      << ", healthy " << healthy.connections() - h0 << ")";
  EXPECT_EQ(diverged.connections(), d0) << "the session went back to the diverged member";
  EXPECT_EQ(waiter_client.session_id(), session) << "a new session: the move lost the old one's leases";
  ASSERT_TRUE(eventually([&] { return first->valid(); }, 10s)) << "the lease was not valid again on the new member";
  first->release();

  const auto asked = Clock::now();
  auto second = waiting.try_acquire_for(15s);
  ASSERT_TRUE(second.has_value());
  EXPECT_LT(Clock::now() - asked, kPeriod) << "the second waiter waited behind the ghost again";
  EXPECT_EQ(waiter_client.diverged_servers_seen(), 1u);
  EXPECT_EQ(diverged.connections(), d0);
  diverged.clear_ghost();
}

}  // namespace
}  // namespace zklock
