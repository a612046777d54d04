// A retained node in use is confirmed by one listing per three quarters of
// the waiting watchdog's period (docs/design.md, "The waiting watchdog"), so
// its re-takes stay local past the period: no release, no marker, no new
// node, no write at the server but the session's heartbeats, and no watch
// callback piling up in the C client.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

#include "client_impl.hpp"  // heartbeat_writes (lib/src)
#include "zk_harness.hpp"
#include "zklock/fair_mutex.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;
using test::unique_lock_path;

std::int64_t server_zxid(const test::ZkServer& s) { return test::last_zxid("127.0.0.1", s.port()); }

// Re-takes every 20 ms for six periods of 500 ms: without the confirming
// listings the first re-take past a period (the latest listing being the
// acquisition's) would be void, and the owner would queue a new node.
TEST(RetainConfirm, ABusyRetainedLockStaysLocalPastThePeriodAtOneReadPerThreeQuarters) {
  test::ZkServer server;
  server.start();
  Client c({.connect = server.connect_string(), .session_timeout = 4s, .wait_check = 500ms});
  auto& impl = *detail::ClientAccess::impl(c);
  FairMutex m(c, unique_lock_path("retain-confirm"), {.retain = 60s});
  Lease first = m.acquire();
  const auto node = first.node_path();
  first.release();

  const auto hb0 = impl.heartbeat_writes();
  const auto z0 = server_zxid(server);
  const auto r0 = server.mntr().counter("zk_packets_received").value_or(0);
  const auto t0 = std::chrono::steady_clock::now();
  int retakes = 0, other_node = 0;
  while (std::chrono::steady_clock::now() - t0 < 3s) {
    Lease l = m.acquire();
    other_node += l.node_path() != node;
    ++retakes;
    l.release();
    std::this_thread::sleep_for(20ms);  // the pace of the workload, not a wait for an event
  }
  const auto z1 = server_zxid(server);
  const auto r1 = server.mntr().counter("zk_packets_received").value_or(0);
  const auto hb = static_cast<std::int64_t>(impl.heartbeat_writes() - hb0);
  const auto sent = r1 - r0 - 2;  // less our own srvr and mntr
  std::printf("[ confirm  ] %d re-takes over 3 s: %lld requests, %lld writes (%lld heartbeats)\n", retakes,
              static_cast<long long>(sent), static_cast<long long>(z1 - z0), static_cast<long long>(hb));
  EXPECT_EQ(other_node, 0) << "a re-take past the period was void: the owner queued a new node";
  EXPECT_LE(z1 - z0, hb) << "a write beyond the heartbeats (a void re-take's delete, marker or create)";
  // 3 s / 375 ms = 8 listings, and the session's pings (a third of 4 s) and
  // heartbeats; a listing per re-take would be ~140.
  EXPECT_GE(sent, 6);
  EXPECT_LE(sent, 8 + 1 + 3 + hb + 4) << "more than one listing per three quarters of a period";
  // The confirmations set no watch: the C client holds one callback, the
  // children watch the acquisition's listing set, not one per listing.
  EXPECT_LE(impl.census().watches, 1u) << "a watch callback per confirming listing";
  EXPECT_TRUE(c.try_stat(node)) << "the node is still retained";
}

}  // namespace
}  // namespace zklock
