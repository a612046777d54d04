// A lease's validity is read from its own session's bound, in one consistent
// read (Client::Impl::valid_until_of): the epoch, the bound, the epoch again.
// Read in two steps, a read that straddled the session's expiry, its
// replacement and the replacement's CONNECTED took the new session's bound
// for the old lease: valid() said true for a node ZooKeeper had deleted.
// The window is a few instructions wide; the test hook holds it open and,
// inside it, makes the client's two words what those three events make
// them, in their order (the bound to the past, the epoch up, a new bound).
#include <gtest/gtest.h>

#include <chrono>

#include "client_impl.hpp"
#include "zk_harness.hpp"
#include "zklock/fair_mutex.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;

// At its first call: the session expires, is replaced and connects, all
// between the reader's load of the epoch and its load of the bound.
class ReplaceBetweenTheLoads : public detail::BoundReadHookForTest {
 public:
  explicit ReplaceBetweenTheLoads(Client::Impl& impl) : impl_(impl) {}
  void between_loads(std::uint64_t epoch) override {
    if (calls_++ != 0) return;
    saved_epoch_ = impl_.epoch_.load();
    saved_bound_ = impl_.valid_until_.load();
    asked_ = epoch;
    impl_.valid_until_.store(Clock::time_point::min().time_since_epoch().count());  // the expiry
    impl_.epoch_.store(saved_epoch_ + 1);                                           // replace_session
    impl_.valid_until_.store((Clock::now() + 60s).time_since_epoch().count());      // its CONNECTED
  }
  // The client as it was: the story was told to one read only.
  void restore() {
    impl_.epoch_.store(saved_epoch_);
    impl_.valid_until_.store(saved_bound_);
  }
  int calls() const { return calls_; }
  std::uint64_t asked() const { return asked_; }
  std::uint64_t saved_epoch() const { return saved_epoch_; }

 private:
  Client::Impl& impl_;
  int calls_ = 0;  // the reader's thread only
  std::uint64_t asked_ = 0, saved_epoch_ = 0;
  Clock::rep saved_bound_ = 0;
};

struct HookGuard {
  explicit HookGuard(detail::BoundReadHookForTest* h) { detail::g_bound_read_hook_for_test.store(h); }
  ~HookGuard() { detail::g_bound_read_hook_for_test.store(nullptr); }
};

TEST(BoundRead, AReadStraddlingTheSessionsReplacementIsNotValid) {
  Client c({.connect = test::shared_server().connect_string(), .session_timeout = 4s});
  auto& impl = *detail::ClientAccess::impl(c);
  FairMutex m(c, test::unique_lock_path("bound-read"));
  Lease lease = m.acquire();
  ASSERT_TRUE(lease.valid());

  ReplaceBetweenTheLoads hook(impl);
  bool straddled = true;
  {
    HookGuard guard(&hook);
    straddled = lease.valid();
  }
  hook.restore();
  ASSERT_EQ(hook.calls(), 1) << "the hook never ran between the loads: the story did not happen";
  EXPECT_EQ(hook.asked(), hook.saved_epoch()) << "the lease's own session was read";
  EXPECT_FALSE(straddled) << "valid() gave the old lease the replacement session's bound";
  EXPECT_TRUE(lease.valid()) << "restored: the lease's own session, its own bound";
  lease.release();
}

}  // namespace
}  // namespace zklock
