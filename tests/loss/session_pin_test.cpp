// An attempt's requests go out only on the session its node belongs to, also
// when the session is replaced between the attempt's own check and the send
// (lock_attempt.hpp, invariant 2; Client::Impl::issue, the pin).
//
// The story CI once failed on (FrozenRetainer.DoesNotReTakeOnWakeAndItsLate-
// WriteIsRefused under ASan, 1 run in about 30 under load): a retainer woke
// past its session and asked for the lock; its acquisition began on the
// expired session, and its create went out on the successor the client had
// just opened. The node it made was alive and nobody's: the attempt, told
// its session was over, never deleted it, and every later acquisition of the
// lock through that client queued behind it. Here the window is held open
// with a test hook, so the story is told the same way every run.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <string>
#include <vector>

#include "client_impl.hpp"
#include "fault_proxy.hpp"
#include "lock_attempt.hpp"
#include "zk_harness.hpp"
#include "zklock/client.hpp"
#include "zklock/fair_mutex.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;
using test::eventually;
using test::unique_lock_path;

// At the first request it sees, lets the client's timer thread go (it was
// held, so the expired session's replacement waited) and returns only once
// the successor session is the client's current one.
class ReplaceBeforeTheFirstSend : public detail::SendHookForTest {
 public:
  ReplaceBeforeTheFirstSend(Client& c, std::promise<void>& gate) : client_(c), gate_(gate) {}
  void before_send(std::uint64_t epoch) override {
    if (calls_.fetch_add(1) != 0) return;
    attempt_epoch_ = epoch;
    gate_.set_value();
    replaced_ = eventually([&] { return client_.session_epoch() > epoch; }, 10s);
  }
  int calls() const { return calls_.load(); }
  std::uint64_t attempt_epoch() const { return attempt_epoch_; }
  bool replaced() const { return replaced_; }

 private:
  Client& client_;
  std::promise<void>& gate_;
  std::atomic<int> calls_{0};
  std::uint64_t attempt_epoch_ = 0;
  bool replaced_ = false;
};

struct HookGuard {
  explicit HookGuard(detail::SendHookForTest* h) { detail::g_send_hook_for_test.store(h); }
  ~HookGuard() { detail::g_send_hook_for_test.store(nullptr); }
};

TEST(SessionPin, ACreateRacingTheSessionsReplacementLeavesNoNodeAndTheLockStaysFree) {
  auto& zk = test::shared_server();
  test::FaultProxy proxy(zk.port());
  Client c({.connect = proxy.connect_string(), .session_timeout = 1s});
  auto probe = test::ZkHandle::connect(zk.connect_string());
  const auto path = unique_lock_path("session-pin");
  FairMutex m(c, path);
  m.acquire().release();  // the ensemble id is cached: the next create goes out from this thread
  const auto marker = path + "-session";
  c.create(marker, "", CreateMode::ephemeral);

  // Hold the timer thread: the expiry's replacement of the session waits there.
  std::promise<void> gate;
  auto held = gate.get_future().share();
  detail::ClientAccess::impl(c)->defer([held] { held.wait(); });

  // Kept away until the server expires the session, then told so.
  proxy.blackhole(true);
  ASSERT_TRUE(eventually([&] { return probe.exists(marker) == ZNONODE; }, 15s)) << "the server never expired the session";
  proxy.blackhole(false);
  proxy.cut();
  ASSERT_TRUE(eventually([&] { return c.state() == ConnectionState::lost; }, 15s));
  ASSERT_EQ(c.session_epoch(), 1u) << "replaced although the timer thread was held";

  // The acquisition begins on the expired session (the client has not
  // replaced it yet); its create is sent after the replacement.
  ReplaceBeforeTheFirstSend hook(c, gate);
  {
    HookGuard guard(&hook);
    try {
      auto lease = m.try_acquire_for(5s);
      ADD_FAILURE() << (lease ? "granted" : "timed out") << " on a session that was over";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), Errc::session_expired) << e.what();
    }
  }
  ASSERT_GE(hook.calls(), 1) << "the hook never ran: the story did not happen";
  EXPECT_EQ(hook.attempt_epoch(), 1u);
  ASSERT_TRUE(hook.replaced()) << "the session was not replaced in time";
  ASSERT_TRUE(c.wait_connected(10s));

  // Nothing of that attempt outlives it, and the lock is free.
  std::vector<std::string> left;
  const bool empty = eventually(
      [&] {
        left.clear();
        return probe.children(path, &left) == ZOK && left.empty();
      },
      3s);
  EXPECT_TRUE(empty) << "a node outlived the attempt that made it: " << (left.empty() ? "" : left.front());
  auto again = m.try_acquire_for(5s);
  ASSERT_TRUE(again.has_value()) << "the free lock was not granted on the new session";
  EXPECT_TRUE(again->valid());
  again->release();
}

}  // namespace
}  // namespace zklock
