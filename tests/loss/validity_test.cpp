// The validity bound, told on real servers: a lease is invalid before anyone
// else can be granted, and its loss is reported once, on every path.
//
//  * A follower cut off from the leader: a 3-server ensemble; the holder
//    talks to one follower only; that follower is cut off from the other two
//    (its quorum and election links blackholed through fault proxies) and
//    keeps answering reads. The majority expires the holder's session and
//    grants a waiter: the holder's valid() was false before that grant, and
//    on_lost fired once.
//  * A freeze across the bound: a holder process frozen (SIGSTOP) across its
//    bound, for less than the session timeout: on SIGCONT the same session is
//    back, and the lease is lost (validity_expired), reported once, never
//    valid again.
//
// Evidence only from quorum-committed writes:
//
//  * A deposed leader: the holder talks to the leader only; the leader's
//    links to its followers are cut as a gray failure cuts them (the
//    followers' ends reset, the leader's open but silent), so the leader
//    keeps answering syncs until syncLimit runs out while the followers
//    elect a new leader, which expires the holder's session and grants a
//    waiter on a follower. The holder's valid() was false before that
//    grant; on_lost fired once.
//  * A delayed ping, then a cut: the holder talks to a follower; the
//    leader's bytes to that follower are held (pings and commits wait)
//    while the follower's requests reach the leader, then released at the
//    instant the follower's bytes to the leader start being dropped: the
//    touches of the held period never reach the leader. Same assertion.
//
// One fence for the keys of one lock (the freeze past the session, seen from
// the store) is told in tests/faults/resource_fence_test.cpp.
#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "fault_proxy.hpp"
#include "story_support.hpp"
#include "zklock/client.hpp"
#include "zklock/fair_mutex.hpp"

namespace zklock::stories {
namespace {

using test::FaultProxy;
using test::ZkHandle;
using test::ZkServer;
using test::ZkServerOptions;

// Three servers; every quorum and election link between member 2 and the
// others passes through a raw FaultProxy, so isolate() cuts member 2 off while
// its client port keeps serving. start() makes member 2 a follower (members 0
// and 1 elect a leader between them first) or the leader (members 2 and 0
// first: with equal histories the higher id leads). syncLimit is long (40
// ticks = 8 s): a cut-off follower keeps answering reads that long, and a
// leader cut off from its followers keeps leading that long.
class PartitionableEnsemble {
 public:
  static constexpr int kIsolated = 2;

  PartitionableEnsemble() {
    int quorum[3], election[3], client[3];
    for (int i = 0; i < 3; ++i) {
      quorum[i] = test::free_loopback_port();
      election[i] = test::free_loopback_port();
      client[i] = test::free_loopback_port();
    }
    auto line = [](int id, int q, int e) {
      return "server." + std::to_string(id) + "=127.0.0.1:" + std::to_string(q) + ":" + std::to_string(e);
    };
    auto proxy = [&](std::vector<FaultProxy*>& into, int port) {
      proxies_.push_back(std::make_unique<FaultProxy>(port, FaultProxy::Framing::raw));
      into.push_back(proxies_.back().get());
      return proxies_.back()->port();
    };
    // The others reach member 2 through proxies (to_isolated_); member 2
    // reaches them through proxies (from_isolated_: quorum 0, election 0,
    // quorum 1, election 1).
    const int q2 = proxy(to_isolated_, quorum[kIsolated]), e2 = proxy(to_isolated_, election[kIsolated]);
    std::vector<std::string> others_view = {line(1, quorum[0], election[0]), line(2, quorum[1], election[1]),
                                            line(3, q2, e2)};
    std::vector<std::string> isolated_view;
    for (int i = 0; i < 2; ++i) {
      const int q = proxy(from_isolated_, quorum[i]);
      const int e = proxy(from_isolated_, election[i]);
      isolated_view.push_back(line(i + 1, q, e));
    }
    isolated_view.push_back(line(3, quorum[kIsolated], election[kIsolated]));
    for (int i = 0; i < 3; ++i) {
      ZkServerOptions o;
      o.my_id = i + 1;
      o.port = client[i];
      o.server_lines = i == kIsolated ? isolated_view : others_view;
      o.extra_config = {"syncLimit=40"};
      members_.push_back(std::make_unique<ZkServer>(o));
    }
  }

  void start(bool isolated_leads = false) {
    const int first = isolated_leads ? kIsolated : 0, second = isolated_leads ? 0 : 1, last = isolated_leads ? 1 : kIsolated;
    members_[first]->launch();
    members_[second]->launch();
    const auto deadline = test::Clock::now() + 60s;
    members_[first]->wait_ready(deadline);
    members_[second]->wait_ready(deadline);
    members_[last]->launch();
    members_[last]->wait_ready(deadline);
  }
  void isolate(bool on) {
    for (auto& p : proxies_) p->blackhole(on);
  }
  // Member 2's links cut as a gray failure cuts them: the others' ends reset
  // (they notice at once), member 2's ends open but silent (it notices only
  // by its own timeouts); new connections between them are reset.
  void gray_isolate() {
    for (auto* p : to_isolated_) p->gray_cut(FaultProxy::Side::client);
    for (auto* p : from_isolated_) p->gray_cut(FaultProxy::Side::server);
  }
  void heal_gray() {
    for (auto& p : proxies_) p->heal_gray();
  }
  // The link on which member 2, a follower, talks to leader `member` (0 or 1):
  // member 2 is its client side.
  FaultProxy& quorum_link_to(int member) { return *from_isolated_.at(static_cast<std::size_t>(2 * member)); }
  ZkServer& member(int i) { return *members_.at(static_cast<std::size_t>(i)); }
  std::string majority_connect() const { return members_[0]->connect_string() + "," + members_[1]->connect_string(); }

 private:
  std::vector<std::unique_ptr<FaultProxy>> proxies_;  // outlive the servers (declared first)
  std::vector<FaultProxy*> to_isolated_, from_isolated_;
  std::vector<std::unique_ptr<ZkServer>> members_;
};

std::string mode_of(ZkServer& s) {
  auto srvr = test::four_letter_word("127.0.0.1", s.port(), "srvr", 1000ms).value_or("");
  if (srvr.find("Mode: leader") != std::string::npos) return "leader";
  if (srvr.find("Mode: follower") != std::string::npos) return "follower";
  return "none";
}

// ---------------------------------------------------------------------------
// A follower cut off from the leader (the first story above).
TEST(Validity, HolderOnAFollowerCutOffFromTheLeaderIsInvalidBeforeTheWaitersGrant) {
  PartitionableEnsemble ens;
  ens.start();
  auto& follower = ens.member(PartitionableEnsemble::kIsolated);
  ASSERT_EQ(mode_of(follower), "follower");
  const std::string lock = test::unique_lock_path("v1");

  ClientOptions ho;
  ho.connect = follower.connect_string();  // one follower only
  ho.session_timeout = 2000ms;
  Client holder_client(ho);
  FairMutex holder_mutex(holder_client, lock);
  Lease held = holder_mutex.acquire();
  std::atomic<int> lost_count{0};
  std::atomic<std::int64_t> lost_at{0};
  std::string lost_reason;
  std::mutex mu;
  std::condition_variable cv;
  held.on_lost([&](LossReason r, const std::string&) {
    std::lock_guard lk(mu);
    lost_reason = std::string(loss_reason_name(r));
    lost_at = mono_us();
    ++lost_count;
    cv.notify_all();
  });

  ClientOptions wo;
  wo.connect = ens.majority_connect();
  wo.session_timeout = 2000ms;
  Client waiter_client(wo);
  FairMutex waiter_mutex(waiter_client, lock);
  bool granted = false, holder_valid_at_grant = true;
  std::int64_t granted_at = 0;
  Lease waiter_lease;
  waiter_mutex.acquire_async([&](AcquireResult r) {
    std::lock_guard lk(mu);
    holder_valid_at_grant = held.valid();  // read at the grant, before anything else
    granted_at = mono_us();
    granted = !r.error.has_value();
    waiter_lease = std::move(r.lease);
    cv.notify_all();
  });
  // The waiter is queued behind the holder before the cut.
  auto probe = ZkHandle::connect(ens.majority_connect());
  ASSERT_TRUE(eventually([&] {
    std::vector<std::string> kids;
    return probe.children(lock, &kids) == ZOK && kids.size() == 2;
  }, 10000ms));

  const auto cut_at = mono_us();
  ens.isolate(true);
  // The cut-off follower still answers reads (the old heartbeat would have
  // kept the bound moving): check it does while the majority moves on.
  {
    std::unique_lock lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, 15s, [&] { return granted; })) << "the majority never granted the waiter";
  }
  const bool follower_still_answers = test::four_letter_word("127.0.0.1", follower.port(), "ruok", 500ms).has_value() &&
                                      mode_of(follower) == "follower";
  {
    std::unique_lock lk(mu);
    ASSERT_TRUE(cv.wait_for(lk, 5s, [&] { return lost_count.load() > 0; })) << "on_lost never fired";
  }
  EXPECT_FALSE(holder_valid_at_grant) << "the holder's valid() was still true when the waiter was granted";
  EXPECT_LE(lost_at.load(), granted_at) << "on_lost fired only after the waiter was granted";
  EXPECT_EQ(lost_reason, "validity_expired");
  EXPECT_FALSE(held.valid());

  // Heal: the follower rejoins, the holder's session is found expired; still one loss.
  ens.isolate(false);
  ASSERT_TRUE(eventually([&] { return holder_client.session_epoch() >= 2; }, 30000ms))
      << "the holder's client never learned that its session expired";
  EXPECT_EQ(lost_count.load(), 1);
  EXPECT_FALSE(held.valid());
  report("V1 follower cut off: waiter granted %.0f ms after the cut; holder lost (%s) %.0f ms after the cut, "
         "%.0f ms before the grant; follower still serving at the grant: %s; on_lost fired %d time(s)",
         ms_between(cut_at, granted_at), lost_reason.c_str(), ms_between(cut_at, lost_at.load()),
         ms_between(lost_at.load(), granted_at), follower_still_answers ? "yes" : "no", lost_count.load());
}

// ---------------------------------------------------------------------------
// A freeze across the bound that the session survives. Session timeout 4 s
// (tickTime 200 ms: heartbeat period 862 ms): the bound is at most ~0.47 of
// it ahead of the present (a chain's first write is two periods old when the
// chain completes, and the bound is that write's send time + 0.9 of the
// timeout), and the server expires no sooner than a whole timeout after the
// freeze began.
TEST(Validity, FreezeAcrossTheBoundLosesTheLeaseOnceWhileTheSessionSurvives) {
  auto& zk = test::shared_server();
  TempDir dir;
  const std::string db = (dir / "store.db").string();
  const std::string lock = test::unique_path("v2");
  constexpr int kSessionMs = 4000;
  Event ready_a;
  auto a = StoryWorker::start(config("A", zk.connect_string(), lock, db, kSessionMs));
  ready_a = a.expect("ready", 20000ms);
  auto b = StoryWorker::start(config("B", zk.connect_string(), lock, db, kSessionMs));
  b.expect("ready", 20000ms);
  a.send("acquire");
  a.expect("acquired", 10000ms);
  b.send("acquire");
  auto probe = ZkHandle::connect(zk.connect_string());
  ASSERT_TRUE(eventually([&] {
    std::vector<std::string> kids;
    return probe.children(lock, &kids) == ZOK && kids.size() == 2;
  }, 10000ms));

  const int pause_ms = kSessionMs * 62 / 100;
  a.signal(SIGSTOP);
  std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));  // the story is the pause itself
  const auto resumed = mono_us();
  a.signal(SIGCONT);
  const auto lost = a.expect("lost", 5000ms);
  EXPECT_EQ(lost.get("reason"), "validity_expired") << lost.raw;
  a.send("check");
  const auto chk = a.expect("check", 5000ms);
  EXPECT_EQ(chk.get("valid"), "0") << chk.raw;
  EXPECT_EQ(chk.get("session"), ready_a.get("session")) << "the session was expected to survive the freeze";
  // (B's grant is not asserted here. Since this test was written the machine
  // gives the node up as soon as the bound lapses while connected, so B is
  // granted; asserting it is left to a later change of this story.)
  // Two more heartbeat rounds later: still lost, never valid again, lost once.
  std::this_thread::sleep_for(std::chrono::milliseconds(kSessionMs));
  a.send("check");
  const auto later = a.expect("check", 5000ms);
  EXPECT_EQ(later.get("valid"), "0") << later.raw;
  EXPECT_EQ(later.get("session"), ready_a.get("session"));
  int lost_lines = 0;
  for (const auto& e : a.events()) lost_lines += e.kind == "lost";
  EXPECT_EQ(lost_lines, 1);
  report("V2 freeze across the bound (%d ms, session %d ms): lost (%s) %.0f ms after SIGCONT, same session %s, "
         "still invalid %d ms later, %d loss report(s)",
         pause_ms, kSessionMs, lost.get("reason").c_str(), ms_between(resumed, lost.t_us),
         ready_a.get("session").c_str(), kSessionMs, lost_lines);
}

// ---------------------------------------------------------------------------
// A holder on `holder_connect`, a waiter queued behind it on
// `waiter_connect`; fault() breaks the ensemble. Records what the holder's
// valid() said at the waiter's grant, and when on_lost fired.
struct LossRace {
  explicit LossRace(const std::string& lock, const std::string& holder_connect, const std::string& waiter_connect,
                    std::chrono::milliseconds holder_session)
      : holder_client(options(holder_connect, holder_session)),
        holder_mutex(holder_client, lock),
        waiter_client(options(waiter_connect, 2000ms)),
        waiter_mutex(waiter_client, lock) {
    held = holder_mutex.acquire();
    held.on_lost([this](LossReason r, const std::string&) {
      std::lock_guard lk(mu);
      lost_reason = std::string(loss_reason_name(r));
      lost_at = mono_us();
      ++lost_count;
      cv.notify_all();
    });
    waiter_mutex.acquire_async([this](AcquireResult r) {
      std::lock_guard lk(mu);
      holder_valid_at_grant = held.valid();  // read at the grant, before anything else
      granted_at = mono_us();
      granted = !r.error.has_value();
      waiter_lease = std::move(r.lease);
      cv.notify_all();
    });
  }
  static ClientOptions options(const std::string& connect, std::chrono::milliseconds session) {
    ClientOptions o;
    o.connect = connect;
    o.session_timeout = session;
    return o;
  }
  bool wait_granted(std::chrono::milliseconds d) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, d, [&] { return granted; });
  }
  bool wait_lost(std::chrono::milliseconds d) {
    std::unique_lock lk(mu);
    return cv.wait_for(lk, d, [&] { return lost_count.load() > 0; });
  }

  Client holder_client;
  FairMutex holder_mutex;
  Lease held;
  Client waiter_client;
  FairMutex waiter_mutex;
  Lease waiter_lease;
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<int> lost_count{0};
  std::atomic<std::int64_t> lost_at{0};
  std::string lost_reason;
  bool granted = false, holder_valid_at_grant = true;
  std::int64_t granted_at = 0;
};

// The waiter's node is queued behind the holder's.
void expect_queued(const std::string& connect, const std::string& lock) {
  auto probe = ZkHandle::connect(connect);
  ASSERT_TRUE(eventually([&] {
    std::vector<std::string> kids;
    return probe.children(lock, &kids) == ZOK && kids.size() == 2;
  }, 10000ms));
}

void expect_lost_before_grant(LossRace& race) {
  ASSERT_TRUE(race.wait_granted(20s)) << "the new majority never granted the waiter";
  ASSERT_TRUE(race.wait_lost(10s)) << "on_lost never fired";
  std::lock_guard lk(race.mu);
  EXPECT_FALSE(race.holder_valid_at_grant) << "the holder's valid() was still true when the waiter was granted";
  EXPECT_LE(race.lost_at.load(), race.granted_at) << "on_lost fired only after the waiter was granted";
  EXPECT_EQ(race.lost_reason, "validity_expired");
  EXPECT_FALSE(race.held.valid());
}

// A deposed leader that keeps answering syncs.
TEST(Validity, HolderOnADeposedLeaderIsInvalidBeforeTheWaitersGrant) {
  PartitionableEnsemble ens;
  ens.start(/*isolated_leads=*/true);
  auto& leader = ens.member(PartitionableEnsemble::kIsolated);
  ASSERT_EQ(mode_of(leader), "leader");
  const std::string lock = test::unique_lock_path("v4");
  LossRace race(lock, leader.connect_string(), ens.majority_connect(), 2000ms);
  expect_queued(ens.majority_connect(), lock);

  const auto cut_at = mono_us();
  ens.gray_isolate();
  expect_lost_before_grant(race);
  // The deposed leader was still leading, answering syncs, at the grant.
  const bool still_leading = mode_of(leader) == "leader";

  ens.heal_gray();
  ASSERT_TRUE(eventually([&] { return race.holder_client.session_epoch() >= 2; }, 40000ms))
      << "the holder's client never learned that its session expired";
  EXPECT_EQ(race.lost_count.load(), 1);
  EXPECT_FALSE(race.held.valid());
  report("V4 deposed leader: waiter granted %.0f ms after the gray cut; holder lost (%s) %.0f ms after the cut, "
         "%.0f ms before the grant; old leader still leading just after the grant: %s; on_lost fired %d time(s)",
         ms_between(cut_at, race.granted_at), race.lost_reason.c_str(), ms_between(cut_at, race.lost_at.load()),
         ms_between(race.lost_at.load(), race.granted_at), still_leading ? "yes" : "no", race.lost_count.load());
}

// A delayed ping, then a cut.
TEST(Validity, DelayedPingThenACutLeavesTheHolderInvalidBeforeTheWaitersGrant) {
  PartitionableEnsemble ens;
  ens.start();
  auto& follower = ens.member(PartitionableEnsemble::kIsolated);
  ASSERT_EQ(mode_of(follower), "follower");
  const int leader = mode_of(ens.member(1)) == "leader" ? 1 : 0;
  ASSERT_EQ(mode_of(ens.member(leader)), "leader");
  const std::string lock = test::unique_lock_path("v5");
  // A 4 s session: the hold (2.7 s) ends before the leader's deadline from
  // the last touch it received (about 4 s after the hold began) and before
  // the holder's client gives up on its connection (2/3 of the timeout after
  // the last answer), and it spans two of the old heartbeat's periods
  // (1.33 s): two answers to requests sent during the hold arrive once it
  // ends, and the old pairing raised the bound past that deadline.
  LossRace race(lock, follower.connect_string(), ens.majority_connect(), 4000ms);
  expect_queued(ens.majority_connect(), lock);
  // The holder's application reads every 100 ms, as a service does: the
  // follower answers a read at once unless a write (or sync) of the session
  // is pending, so the connection lives through the hold.
  std::atomic<bool> stop_reading{false};
  std::thread reader([&] {
    for (int n = 0; n < 400 && !stop_reading.load(); ++n) {  // bounded: 40 s
      try {
        race.holder_client.stat(lock);
      } catch (const Error&) {
      }
      std::this_thread::sleep_for(100ms);
    }
  });
  struct Join {
    std::atomic<bool>& stop;
    std::thread& t;
    ~Join() {
      stop = true;
      t.join();
    }
  } join{stop_reading, reader};

  auto& link = ens.quorum_link_to(leader);
  const auto hold_at = mono_us();
  link.hold_replies(true);  // the leader's pings and commits wait; our requests still reach it
  std::this_thread::sleep_for(2700ms);  // the story is the delay itself
  link.drop_requests(true);  // from now on the follower's ping replies (its touches) are lost
  link.hold_replies(false);  // the delayed stream arrives: held answers reach the holder
  expect_lost_before_grant(race);

  // Heal with a fresh connection: the old stream lost bytes in its middle.
  // The holder's client comes back (with a new session, or with the old one
  // if its own delete of the node freed the lock): still one loss.
  link.drop_requests(false);
  link.cut();
  ASSERT_TRUE(eventually([&] { return race.holder_client.connected(); }, 40000ms))
      << "the holder's client never came back after the heal";
  EXPECT_EQ(race.lost_count.load(), 1);
  EXPECT_FALSE(race.held.valid());
  report("V5 delayed ping then cut: waiter granted %.0f ms after the hold began; holder lost (%s) %.0f ms after "
         "it, %.0f ms before the grant; on_lost fired %d time(s); back in session epoch %llu",
         ms_between(hold_at, race.granted_at), race.lost_reason.c_str(), ms_between(hold_at, race.lost_at.load()),
         ms_between(race.lost_at.load(), race.granted_at), race.lost_count.load(),
         static_cast<unsigned long long>(race.holder_client.session_epoch()));
}

}  // namespace
}  // namespace zklock::stories
