// zklock-detector in-process against a real ZooKeeper server: cycles and
// their revocation (the record, each policy, 3-cycles, self-loops, soft
// read-write edges, min-wait, the fast path, bad input), a cycle that
// dissolves before the multi, a standby's takeover, and cycles through
// retained leases. Cycles are planted by creating lock nodes directly
// (planted::Owner in detector_fixtures.hpp: EPHEMERAL_SEQUENTIAL children
// with zklock names and data, one session per owner) — exactly how a client
// in another language would appear to the detector. The retained-lease tests
// at the end use real FairMutex clients instead (the idle node is the
// library's). The mirror and the metrics: mirror_metrics_test.cpp.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>
#include <future>
#include <memory>
#include <set>
#include <thread>

#include "detector/daemon.hpp"
#include "detector_fixtures.hpp"
#include "zk_harness.hpp"
#include "zklock/fair_mutex.hpp"
#include "zklock/protocol/node_data.hpp"
#include "zklock/protocol/revoke.hpp"
#include "zklock/token.hpp"

namespace zklock::detector {
namespace {

using namespace zklock::model;
using namespace planted;

using namespace std::chrono_literals;

TEST(Detector, BreaksATwoCycleWithTheYoungestVictimAndARecord) {
  const auto root = test::unique_path("det");
  Owner a("A"), b("B");
  const auto t = plant_two_cycle(a, b, root);
  const auto cfg = config(root);
  Running run(cfg);
  const auto revoked = run.wait_for("revoked", 1, 10s);
  ASSERT_EQ(revoked.size(), 1u);
  const auto& r = revoked[0];
  EXPECT_EQ(r.victim.owner, "B");
  EXPECT_EQ(r.victim.node, t.b_waits);
  print_latency(r, cfg);
  EXPECT_FALSE(exists(a.client(), t.b_waits));
  EXPECT_TRUE(exists(a.client(), t.a_waits));
  EXPECT_TRUE(exists(a.client(), t.a_holds));
  EXPECT_TRUE(exists(a.client(), t.b_holds));
  const auto rec = protocol::read_revocation_record(a.client(), t.b_waits);
  ASSERT_TRUE(rec);
  EXPECT_EQ(rec->victim_owner, "B");
  EXPECT_EQ(rec->policy, "youngest");
  EXPECT_EQ(rec->mode, "wait");
  EXPECT_EQ(rec->detector, "detector-test");
  EXPECT_EQ(cycle_text(*rec), "A -[" + root + "/y]-> B -[" + root + "/x]-> A");
  const auto token = FencingToken::try_parse(rec->victim_token);
  ASSERT_TRUE(token) << rec->victim_token;
  EXPECT_GT(token->czxid(), 0);
  EXPECT_EQ(run.daemon().metrics().revocations("revoked"), 1u);
}

// A new node schedules a scan at its min-wait deadline; the loop must wake
// for it even while it sleeps towards a much later periodic tick.
TEST(Detector, TheFastPathScansAtTheMinWaitDeadlineNotAtTheNextTick) {
  const auto root = test::unique_path("det-fast");
  auto cfg = config(root);
  cfg.interval = 20s;
  cfg.dry_run = true;
  Running run(cfg);
  ASSERT_TRUE(run.daemon().mirror().wait_idle(10s));
  std::this_thread::sleep_for(300ms);  // the first tick's scan is over
  Owner a("A"), b("B");
  plant_two_cycle(a, b, root);
  const auto closed = std::chrono::steady_clock::now();
  const auto found = run.wait_for("dry_run", 1, 10s);
  ASSERT_EQ(found.size(), 1u) << "not detected before the next tick";
  const auto after = std::chrono::duration<double>(std::chrono::steady_clock::now() - closed).count();
  std::printf("[ detector ] fast path: detected %.3f s after the cycle closed (min-wait %.3f s)\n", after,
              std::chrono::duration<double>(cfg.min_wait).count());
  EXPECT_LT(after, 3.0);
}

TEST(Detector, EachPolicyChoosesItsVictim) {
  struct Case {
    Policy policy;
    std::string expected;
  };
  // A: priority 5, holds 2 nodes, older wait. B: priority -3, holds 1, younger wait.
  for (const auto& c : {Case{Policy::youngest, "B"}, Case{Policy::oldest, "A"}, Case{Policy::fewest_held, "B"},
                        Case{Policy::most_held, "A"}, Case{Policy::lowest_priority, "B"}}) {
    const auto root = test::unique_path("det-policy");
    Owner a("A", 5), b("B", -3);
    a.hold(root + "/extra");
    plant_two_cycle(a, b, root);
    auto cfg = config(root, c.policy);
    Running run(cfg);
    const auto revoked = run.wait_for("revoked", 1, 10s);
    ASSERT_EQ(revoked.size(), 1u) << policy_name(c.policy);
    EXPECT_EQ(revoked[0].victim.owner, c.expected) << policy_name(c.policy);
    print_latency(revoked[0], cfg);
  }
}

TEST(Detector, ThreeCycleSelfLoopAndDisjointCyclesInOneScan) {
  const auto root = test::unique_path("det-many");
  Owner a("A"), b("B"), c("C"), p("P"), q("Q"), s("S");
  // 3-cycle A -> B -> C -> A
  a.hold(root + "/a");
  b.hold(root + "/b");
  c.hold(root + "/c");
  a.enqueue(root + "/b", Mode::exclusive);
  b.enqueue(root + "/c", Mode::exclusive);
  const auto c_waits = c.enqueue(root + "/a", Mode::exclusive);
  // disjoint 2-cycle P <-> Q
  p.hold(root + "/p");
  q.hold(root + "/q");
  p.enqueue(root + "/q", Mode::exclusive);
  const auto q_waits = q.enqueue(root + "/p", Mode::exclusive);
  // self-loop: S holds s and waits for s
  s.hold(root + "/s");
  const auto s_waits = s.enqueue(root + "/s", Mode::exclusive);

  const auto cfg = config(root);
  Running run(cfg);
  const auto revoked = run.wait_for("revoked", 3, 10s);
  ASSERT_EQ(revoked.size(), 3u);
  std::set<std::string> victims;
  for (const auto& r : revoked) {
    victims.insert(r.victim.node);
    print_latency(r, cfg);
  }
  EXPECT_EQ(victims, (std::set<std::string>{c_waits, q_waits, s_waits}));
  EXPECT_FALSE(exists(a.client(), c_waits));
  EXPECT_FALSE(exists(a.client(), s_waits));
}

TEST(Detector, ReadWriteSoftEdgeCycle) {
  const auto root = test::unique_path("det-rw");
  Owner r1("R1"), w("W"), r2("R2");
  r1.enqueue(root + "/x", Mode::shared);  // R1 holds X (shared)
  r2.enqueue(root + "/y", Mode::shared);  // R2 holds Y (shared)
  w.enqueue(root + "/x", Mode::exclusive);  // W waits for X behind R1
  const auto r2_waits = r2.enqueue(root + "/x", Mode::shared);  // R2 waits for X behind W (soft)
  const auto r1_waits = r1.enqueue(root + "/y", Mode::exclusive);  // R1 waits for Y: cycle closes
  const auto cfg = config(root);
  Running run(cfg);
  const auto revoked = run.wait_for("revoked", 1, 10s);
  ASSERT_EQ(revoked.size(), 1u);
  EXPECT_NE(revoked[0].text.find("~["), std::string::npos) << revoked[0].text;  // a soft edge on the cycle
  EXPECT_EQ(revoked[0].victim.node, r1_waits);  // youngest
  EXPECT_TRUE(exists(w.client(), r2_waits));
  print_latency(revoked[0], cfg);
}

TEST(Detector, ACycleThatDissolvesBeforeTheMultiIsNotRevokedAndCounted) {
  const auto root = test::unique_path("det-race");
  Owner a("A"), b("B");
  const auto t = plant_two_cycle(a, b, root);
  auto cfg = config(root);
  Daemon d(cfg);
  ASSERT_TRUE(d.election().wait_leader(10s));
  ASSERT_TRUE(d.mirror().wait_idle(10s));
  // Let the waits age past min-wait, then dissolve the cycle between the
  // snapshot and the multi: A gives up its hold on X.
  std::this_thread::sleep_until(std::chrono::steady_clock::now() + cfg.min_wait + 100ms);
  d.before_revoke = [&](const Cycle&) { remove_node(a.client(), t.a_holds); };
  const auto reports = d.scan_once();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].outcome, "aborted") << reports[0].detail;
  EXPECT_EQ(d.metrics().aborted(), 1u);
  EXPECT_TRUE(exists(a.client(), t.b_waits));  // nothing revoked
  EXPECT_FALSE(protocol::read_revocation_record(a.client(), t.b_waits));
  EXPECT_NE(d.metrics().render().find("zklock_detector_revocations_aborted_total 1"), std::string::npos);
}

TEST(Detector, WaitsYoungerThanMinWaitAreNeverRevoked) {
  const auto root = test::unique_path("det-young");
  Owner a("A"), b("B");
  const auto t = plant_two_cycle(a, b, root);
  auto cfg = config(root);
  cfg.min_wait = 60s;
  Running run(cfg);
  // At least ten full scans of a mirrored tree, then look.
  ASSERT_TRUE(run.daemon().mirror().wait_idle(10s));
  const auto start = run.daemon().metrics().scans();
  test::eventually([&] { return run.daemon().metrics().scans() >= start + 10; }, 10s);
  EXPECT_GE(run.daemon().metrics().scans(), start + 10);
  EXPECT_EQ(run.count("revoked"), 0u);
  EXPECT_EQ(run.daemon().metrics().cycles_detected(), 0u);
  EXPECT_TRUE(exists(a.client(), t.b_waits));
}

TEST(Detector, BadInputIsSkippedAndTheCycleStillFound) {
  const auto root = test::unique_path("det-bad");
  Owner a("A"), b("B");
  // A foreign child, a foreign sequential node, and a zklock-named node with garbage data.
  a.client().ensure_path(root + "/x/not-a-lock-node", CreateMode::persistent);
  ASSERT_NO_THROW(a.client().create(root + "/x/" + protocol::lock_node_prefix(Mode::shared, protocol::owner_key("Z"), protocol::new_guid()),
                                     "{garbage", CreateMode::ephemeral_sequential));
  plant_two_cycle(a, b, root);
  const auto cfg = config(root);
  Running run(cfg);
  const auto revoked = run.wait_for("revoked", 1, 10s);
  ASSERT_EQ(revoked.size(), 1u);
  EXPECT_GE(run.daemon().mirror().stats().bad_data, 1u);
}

TEST(Detector, StandbyTakesOverAndADeposedLeaderCannotRevoke) {
  const auto root = test::unique_path("det-ha");
  auto cfg1 = config(root);
  cfg1.id = "first";
  auto cfg2 = config(root);
  cfg2.id = "second";
  auto first = std::make_unique<Running>(cfg1);
  ASSERT_TRUE(first->daemon().election().wait_leader(10s));
  Running second(cfg2);
  ASSERT_TRUE(test::eventually([&] { return second.daemon().election().candidate_node().has_value(); }, 5s));
  EXPECT_FALSE(second.daemon().is_leader());
  const auto old_leader_node = *first->daemon().election().leader_node();

  first.reset();  // graceful shutdown deletes the leader node
  ASSERT_TRUE(second.daemon().election().wait_leader(10s));

  Owner a("A"), b("B");
  const auto t = plant_two_cycle(a, b, root);
  const auto revoked = second.wait_for("revoked", 1, 10s);
  ASSERT_EQ(revoked.size(), 1u);
  print_latency(revoked[0], cfg2);

  // A deposed leader's revocation: its leader node is gone, so nothing happens.
  Owner c("C"), d("D");
  const auto u = plant_two_cycle(c, d, test::unique_path("det-ha-unwatched"));
  protocol::RevocationRequest req;
  req.victims = {{u.b_waits, "D", 0}};
  req.checks = {u.a_holds, u.b_holds, u.a_waits, u.b_waits};
  req.leader_node = old_leader_node;
  req.record.detector = "first";
  const auto result = revoke(c.client(), req);
  EXPECT_EQ(result.outcome, protocol::RevokeOutcome::deposed) << result.detail;
  EXPECT_TRUE(exists(c.client(), u.b_waits));
  EXPECT_FALSE(protocol::read_revocation_record(c.client(), u.b_waits));
}

// ---------------------------------------------------------------------------
// Retained leases. An idle retained node is, to the detector, a
// node held by its owner. Owner A releases X with retain on (its node stays,
// idle), then waits on Y, held by B; B queues on X behind A's idle node. For
// a moment the wait-for graph has the cycle A -[Y]-> B -[X]-> A. It
// dissolves as soon as A's children watch on X fires: A releases X for real
// and B is granted. The detector must never revoke anything for it.
//
// Why a detector WOULD revoke if the cycle persisted: A's wait on Y is aged
// past min-wait before B queues, so the cycle counts as soon as B's wait is
// min-wait (1 s here) old; the detector's fast path scans at that deadline
// (TheFastPathScansAtTheMinWaitDeadlineNotAtTheNextTick). The control test
// below runs the same steps with A holding X for real, and the detector
// revokes B's wait within min-wait + interval + 1 s.

AcquireOptions as(const char* owner) {
  AcquireOptions o;
  o.owner = owner;
  return o;
}

// An acquire_async, waited for from the test thread. The callback owns the
// promise: it may still run (with an error) while the clients close after a
// failed assertion.
struct Pending {
  std::shared_ptr<std::promise<AcquireResult>> promise = std::make_shared<std::promise<AcquireResult>>();
  std::future<AcquireResult> result = promise->get_future();
  AcquireCallback callback() {
    return [p = promise](AcquireResult r) { p->set_value(std::move(r)); };
  }
  bool done(std::chrono::milliseconds within) { return result.wait_for(within) == std::future_status::ready; }
};

ClientOptions owner_client() { return {.connect = test::shared_server().connect_string(), .session_timeout = 6s}; }

// The node of `lock` other than `not_this` (a full path), or "" if none.
std::string other_node(Client& c, const std::string& lock, const std::string& not_this) {
  for (const auto& name : c.children(lock)) {
    if (lock + "/" + name != not_this) return lock + "/" + name;
  }
  return {};
}

// A min-wait of 1 s: the dissolving cycle lasts one notification and one
// multi (tens of ms), so a loaded machine has ample margin, and the control
// still revokes within about 1.2 s.
DetectorConfig retain_config(const std::string& root) {
  auto cfg = config(root);
  cfg.min_wait = 1s;
  return cfg;
}

using test::ms_since;

TEST(Detector, ACycleThroughAnIdleRetainedNodeDissolvesAndIsNeverRevoked) {
  const auto root = test::unique_path("det-retain");
  const auto x = root + "/x", y = root + "/y";
  const auto cfg = retain_config(root);
  Running run(cfg);
  ASSERT_TRUE(run.daemon().election().wait_leader(10s));
  ASSERT_TRUE(run.daemon().mirror().wait_idle(10s));

  Client ca(owner_client()), cb(owner_client());
  FairMutex ax(ca, x, {.retain = 60s}), ay(ca, y);  // retained far longer than the test: only the watch ends it
  FairMutex bx(cb, x), by(cb, y);

  Lease a_first = ax.acquire(as("A"));
  const auto a_x = a_first.node_path();
  a_first.release();
  ASSERT_TRUE(ca.try_stat(a_x)) << "A's node on X stays, idle retained";

  Lease b_y = by.acquire(as("B"));
  Pending a_on_y;
  ay.acquire_async(a_on_y.callback(), as("A"));
  ASSERT_TRUE(test::eventually([&] { return cb.children(y).size() == 2; }, 5s));
  const auto a_y = other_node(cb, y, b_y.node_path());
  // A's wait on Y ages past min-wait: from now on B's wait on X is all a
  // revocation would need (see the control test).
  std::this_thread::sleep_for(cfg.min_wait + cfg.interval);
  ASSERT_FALSE(a_on_y.done(0ms));

  const auto queued = std::chrono::steady_clock::now();
  Pending b_on_x;
  bx.acquire_async(b_on_x.callback(), as("B"));
  ASSERT_TRUE(b_on_x.done(5s)) << "B not granted X behind A's idle retained node";
  const auto granted_ms = ms_since(queued);
  auto bx_result = b_on_x.result.get();
  ASSERT_FALSE(bx_result.error) << bx_result.error->what();
  const auto b_x = bx_result.lease.node_path();
  EXPECT_FALSE(ca.try_stat(a_x)) << "A's retained node was released for real";
  std::printf("[ detector ] B granted X %.1f ms after queueing behind A's idle retained node (min-wait %lld ms)\n",
              granted_ms, static_cast<long long>(cfg.min_wait.count()));
  EXPECT_LT(granted_ms, static_cast<double>(cfg.min_wait.count())) << "the cycle outlived min-wait";

  // Watch over min-wait plus ten intervals plus a second: B's wait would
  // have been revoked about min-wait (+ one scan) after it queued.
  const auto scans_before = run.daemon().metrics().scans();
  std::this_thread::sleep_for(cfg.min_wait + 10 * cfg.interval + 1s);
  const auto scans = run.daemon().metrics().scans() - scans_before;
  std::printf("[ detector ] %llu scans over %.1f s after the grant: outcomes %zu, cycles detected %llu\n",
              static_cast<unsigned long long>(scans), ms_since(queued) / 1000.0, run.outcomes().size(),
              static_cast<unsigned long long>(run.daemon().metrics().cycles_detected()));
  EXPECT_GE(scans, 5u);
  EXPECT_TRUE(run.outcomes().empty());
  EXPECT_EQ(run.daemon().metrics().cycles_detected(), 0u);
  EXPECT_EQ(run.daemon().metrics().revocations("revoked"), 0u);
  for (const auto& node : {a_x, a_y, b_x, b_y.node_path()}) {
    EXPECT_FALSE(protocol::read_revocation_record(ca, node)) << node;
  }
  EXPECT_TRUE(bx_result.lease.valid());
  EXPECT_TRUE(b_y.valid());
  if (a_on_y.done(0ms)) {
    auto early = a_on_y.result.get();
    FAIL() << "A's wait on Y ended while B holds Y: " << (early.error ? early.error->what() : "granted");
  }
  EXPECT_TRUE(ca.try_stat(a_y));

  // B finishes; A is granted Y (not a deadlock victim).
  b_y.release();
  ASSERT_TRUE(a_on_y.done(5s));
  auto ay_result = a_on_y.result.get();
  ASSERT_FALSE(ay_result.error) << ay_result.error->what();
  EXPECT_TRUE(ay_result.lease.valid());
  ay_result.lease.release();
  bx_result.lease.release();
}

// The control: the same steps, but A holds X for real. The cycle persists
// and the detector breaks it by revoking B's wait (the youngest) — so the
// timing above is one in which a persisting cycle is revoked.
TEST(Detector, RetainedControlTheSameCycleThroughAHeldNodeIsRevoked) {
  const auto root = test::unique_path("det-retain-ctl");
  const auto x = root + "/x", y = root + "/y";
  const auto cfg = retain_config(root);
  Running run(cfg);
  ASSERT_TRUE(run.daemon().election().wait_leader(10s));
  ASSERT_TRUE(run.daemon().mirror().wait_idle(10s));

  Client ca(owner_client()), cb(owner_client());
  FairMutex ax(ca, x), ay(ca, y);
  FairMutex bx(cb, x), by(cb, y);

  Lease a_x = ax.acquire(as("A"));  // held, not released
  Lease b_y = by.acquire(as("B"));
  Pending a_on_y;
  ay.acquire_async(a_on_y.callback(), as("A"));
  ASSERT_TRUE(test::eventually([&] { return cb.children(y).size() == 2; }, 5s));
  std::this_thread::sleep_for(cfg.min_wait + cfg.interval);

  const auto queued = std::chrono::steady_clock::now();
  Pending b_on_x;
  bx.acquire_async(b_on_x.callback(), as("B"));
  const auto bound = cfg.min_wait + cfg.interval + 1s;
  ASSERT_TRUE(b_on_x.done(10s)) << "B's wait on X was never revoked";
  const auto revoked_ms = ms_since(queued);
  auto bx_result = b_on_x.result.get();
  ASSERT_TRUE(bx_result.error) << "B granted X while A holds it";
  EXPECT_EQ(bx_result.error->code(), Errc::deadlock_victim) << bx_result.error->what();
  std::printf("[ detector ] control: B's wait revoked %.1f ms after queueing (bound %lld ms)\n", revoked_ms,
              static_cast<long long>(std::chrono::duration_cast<std::chrono::milliseconds>(bound).count()));
  EXPECT_LT(revoked_ms, (std::chrono::duration<double, std::milli>(bound).count()));
  const auto revoked = run.wait_for("revoked", 1, 5s);
  ASSERT_EQ(revoked.size(), 1u);
  EXPECT_EQ(revoked[0].victim.owner, "B");
  const auto rec = protocol::read_revocation_record(ca, revoked[0].victim.node);
  ASSERT_TRUE(rec);
  EXPECT_EQ(cycle_text(*rec), "A -[" + y + "]-> B -[" + x + "]-> A");
  EXPECT_EQ(run.daemon().metrics().revocations("revoked"), 1u);

  EXPECT_FALSE(a_on_y.done(0ms));
  b_y.release();
  ASSERT_TRUE(a_on_y.done(5s));
  auto ay_result = a_on_y.result.get();
  ASSERT_FALSE(ay_result.error) << ay_result.error->what();
  ay_result.lease.release();
  a_x.release();
}

}  // namespace
}  // namespace zklock::detector
