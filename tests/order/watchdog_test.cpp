// The waiting watchdog (lock_machine.hpp, invariant 7) against a real server
// behind the protocol-aware fault proxy: a waiter does not depend on one
// notification arriving.
//
// Without the watchdog each story below waits out the waiter's whole
// timeout: a waiter armed one deletion watch and then only waited.
#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <optional>
#include <string>
#include <thread>

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

constexpr auto kPeriod = 1s;  // ClientOptions::wait_check of the waiters here

ClientOptions through(const test::FaultProxy& proxy) {
  return {.connect = proxy.connect_string(), .session_timeout = 4s, .wait_check = kPeriod};
}

struct Grant {
  std::optional<Lease> lease;
  Clock::time_point at;
};

std::future<Grant> acquire_in_background(FairMutex& m, std::chrono::milliseconds timeout) {
  return std::async(std::launch::async, [&m, timeout] {
    Grant g;
    g.lease = m.try_acquire_for(timeout);
    g.at = Clock::now();
    return g;
  });
}

double ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// The head's predecessor is released, and the notification of its deletion
// is lost on the way: the head is granted at its watchdog's first check, not
// at its 30-second timeout.
TEST(WaitingWatchdog, ALostDeletionOfTheHeadsPredecessorIsFoundWithinThePeriod) {
  auto& zk = test::shared_server();
  test::FaultProxy proxy(zk.port());
  Client holder_client({.connect = zk.connect_string()});
  Client waiter_client(through(proxy));
  const auto path = unique_lock_path("watchdog-drop");
  FairMutex held(holder_client, path), waiting(waiter_client, path);
  Lease lease = held.acquire();
  auto outcome = acquire_in_background(waiting, 30s);
  proxy.drop_notification(test::wire::kDeleted, lease.node_path());
  // The waiter's deletion watch on the holder's node is set: the story starts.
  ASSERT_TRUE(eventually([&] { return proxy.answered(test::wire::kGetData, lease.node_path()) >= 1; }, 10s));

  const auto released = Clock::now();
  lease.release();
  ASSERT_EQ(outcome.wait_for(15s), std::future_status::ready) << "not granted within 15 s of the release";
  auto g = outcome.get();
  ASSERT_TRUE(g.lease.has_value()) << "timed out";
  EXPECT_EQ(proxy.wire_counts().notifications_dropped, 1u) << "the notification was not dropped: the story did not happen";
  // The watchdog's first check comes a period into the wait, rounded up to
  // a grid of at most 1 s (so that a client's waiters check together).
  EXPECT_LT(g.at - released, kPeriod + 1s) << "granted " << ms(g.at - released) << " ms after the release";
  EXPECT_TRUE(g.lease->valid());
  std::printf("[watchdog] lost notification: granted %.0f ms after the release (period %lld ms)\n",
              ms(g.at - released), static_cast<long long>(std::chrono::milliseconds(kPeriod).count()));
}

// The waiter's server lists a node at the head of the queue that the leader
// does not have, and answers reads of it (a diverged member). Its watch on
// that node can never fire; the watchdog's probe at the leader finds the
// node gone, reports the diverged server, and the waiter is granted.
TEST(WaitingWatchdog, AGhostAtTheHeadIsProbedAtTheLeaderAndPassed) {
  auto& zk = test::shared_server();
  test::FaultProxy proxy(zk.port());
  Client direct({.connect = zk.connect_string()});
  Client waiter_client(through(proxy));
  const auto path = unique_lock_path("watchdog-ghost");
  {
    // A few sequence numbers used up, so that the ghost's orders first.
    FairMutex warm(direct, path);
    for (int i = 0; i < 3; ++i) warm.acquire().release();
  }
  const auto ghost = protocol::lock_node_prefix(Mode::exclusive, protocol::owner_key("ghost"),
                                                std::string(32, 'a')) + "0000000000";
  proxy.ghost(path, ghost);
  FairMutex waiting(waiter_client, path);
  const auto asked = Clock::now();
  auto outcome = acquire_in_background(waiting, 30s);
  ASSERT_EQ(outcome.wait_for(15s), std::future_status::ready) << "not granted within 15 s";
  auto g = outcome.get();
  ASSERT_TRUE(g.lease.has_value()) << "timed out behind the ghost";
  const auto counts = proxy.wire_counts();
  EXPECT_GE(counts.listings_rewritten, 2u) << "the ghost was not listed again: the story did not happen";
  EXPECT_GE(counts.reads_rewritten, 1u);
  EXPECT_EQ(waiter_client.diverged_servers_seen(), 1u);
  EXPECT_LT(g.at - asked, 2 * kPeriod + 1s) << "granted " << ms(g.at - asked) << " ms after asking";
  std::printf("[watchdog] ghost at the head: granted %.0f ms after asking; %llu listings showed it\n",
              ms(g.at - asked), static_cast<unsigned long long>(counts.listings_rewritten));
  proxy.clear_ghost();
}

// An owner's idle retained node is deleted by another client, and the
// children notification that would tell the owner is lost: its quiet watch
// still says nobody came. Past the watchdog's period since a listing last
// showed the node, the owner's re-take is not local: it queues behind the
// lock's new holder, so no two leases are valid at once.
TEST(WaitingWatchdog, AReTakePastThePeriodWithoutAListingIsNotLocal) {
  auto& zk = test::shared_server();
  test::FaultProxy proxy(zk.port());
  Client owner_client(through(proxy));
  Client other({.connect = zk.connect_string()});
  const auto path = unique_lock_path("watchdog-retain");
  FairMutex mine(owner_client, path, MutexOptions{.retain = 60s});
  Lease first = mine.acquire();
  const auto node = first.node_path();
  const auto first_token = first.token();
  first.release();
  const auto released = Clock::now();
  ASSERT_EQ(other.children(path).size(), 1u) << "the released node is not retained";

  proxy.drop_notification(test::wire::kChildrenChanged, path);
  other.remove(node);  // an operator, say
  FairMutex theirs(other, path);
  Lease held = theirs.acquire();
  ASSERT_TRUE(eventually([&] { return proxy.wire_counts().notifications_dropped == 1; }, 5s))
      << "the children notification was not dropped: the story did not happen";
  // The story is the time passing: the period runs out with no listing.
  std::this_thread::sleep_until(released + kPeriod + 200ms);

  auto again = mine.try_acquire_for(1500ms);
  EXPECT_FALSE(again.has_value()) << "re-taken locally (token " << again->token().str() << ", the first was "
                                  << first_token.str() << ") while " << held.token().str() << " is held";
  const auto theirs_token = held.token();
  held.release();
  auto later = mine.try_acquire_for(10s);
  ASSERT_TRUE(later.has_value()) << "not granted after the other holder released";
  EXPECT_TRUE(theirs_token < later->token());
}

}  // namespace
}  // namespace zklock
