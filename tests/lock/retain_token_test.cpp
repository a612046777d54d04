// Every lease its own token (docs/fencing.md, "The token"): a local re-take
// of a retained node is a new lease, and its token orders after every
// earlier lease of the node in a fence, while a grant to another holder (a
// later node) orders after both. The story fencing exists for: a lease
// whose write timed out (outcome unknown) is released, the same owner
// re-takes locally and writes again, and the first write arrives late.
// Written against the token's text form and its order only.
#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "zk_harness.hpp"
#include "zklock/fair_mutex.hpp"
#include "zklock/fence_gate.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;
using test::unique_lock_path;

ClientOptions shared_opts() { return {.connect = test::shared_server().connect_string(), .session_timeout = 4s}; }

TEST(RetainToken, AReTakesTokenRefusesTheEarlierLeasesLateWrite) {
  Client c(shared_opts()), other(shared_opts());
  const auto path = unique_lock_path("retain-token");
  FairMutex m(c, path, {.retain = 60s});
  FairMutex m2(other, path);
  FenceGate gate;

  Lease first = m.acquire();
  const auto node = first.node_path();
  const FencingToken w1 = first.token();  // W1 goes out, its answer never comes
  first.release();                        // as error paths do: the node stays, idle
  Lease again = m.acquire();
  ASSERT_EQ(again.node_path(), node) << "not a local re-take: the story did not happen";
  const FencingToken w2 = again.token();
  EXPECT_NE(w2, w1) << "two leases carry the same token " << w1.str();
  EXPECT_TRUE(w2 > w1) << w2.str() << " does not order after " << w1.str();
  EXPECT_EQ(w2.str(), w1.str() + ".1") << "the node's first re-take: its czxid, lease ordinal 1";

  EXPECT_TRUE(gate.admit(path, w2.str())) << "W2, the re-take's write";
  const auto late = gate.admit(path, w1.str());  // W1 arrives after W2
  EXPECT_EQ(late.verdict, AdmitResult::Verdict::stale) << late.reason();
  EXPECT_EQ(gate.highest(path).value_or(FencingToken()), w2);

  // Another holder (a later node) orders after both leases of the node.
  again.release();
  auto successor = m2.try_acquire_for(10s);
  ASSERT_TRUE(successor.has_value());
  EXPECT_TRUE(successor->token() > w2);
  EXPECT_TRUE(gate.admit(path, successor->token().str()));
  EXPECT_EQ(gate.admit(path, w2.str()).verdict, AdmitResult::Verdict::stale);
  EXPECT_EQ(gate.admit(path, w1.str()).verdict, AdmitResult::Verdict::stale);
  successor->release();
}

// Threads that share an explicit owner share the retained node: each of
// their re-takes is a lease of its own, with a token above the one before.
TEST(RetainToken, ThreadsSharingAnOwnerGetANewTokenOnEveryReTake) {
  Client c(shared_opts());
  const auto path = unique_lock_path("retain-token-threads");
  FairMutex m(c, path, {.retain = 60s});
  const AcquireOptions owner{.owner = "shared-owner"};
  m.acquire(owner).release();  // retained: from here on each acquisition is a re-take

  std::mutex mu;  // one caller of the owner at a time: a second one would be refused (not re-entrant)
  std::vector<std::pair<std::string, FencingToken>> grants;  // GUARDED_BY(mu): in grant order
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 50; ++i) {
        std::lock_guard lk(mu);
        Lease l = m.acquire(owner);
        grants.emplace_back(l.node_path(), l.token());
        l.release();
      }
    });
  }
  for (auto& th : threads) th.join();
  ASSERT_EQ(grants.size(), 200u);
  int local = 0;
  for (std::size_t i = 1; i < grants.size(); ++i) {
    local += grants[i].first == grants[i - 1].first;
    EXPECT_TRUE(grants[i].second > grants[i - 1].second)
        << "grant " << i << ": " << grants[i].second.str() << " after " << grants[i - 1].second.str();
  }
  EXPECT_GT(local, 0) << "no re-take was local: the story did not happen";
}

}  // namespace
}  // namespace zklock
