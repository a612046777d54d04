// zklock-detector end to end, security: with digest auth and ACLs on
// /zklock and the lock parents, strangers (and lock users) cannot take,
// create, list, delete, revoke or forge records, an inspector only reads,
// and the zklock-detector binary, authenticated with --auth-file, revokes a
// real deadlock. The documented limit closes it. The fixtures: e2e_fixtures.hpp.
#include <gtest/gtest.h>

#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "e2e_fixtures.hpp"
#include "zk_harness.hpp"
#include "zklock/protocol/node_name.hpp"
#include "zklock/protocol/revoke.hpp"

namespace zklock::detector {
namespace {

using namespace zklock::model;
using namespace e2e;

using namespace std::chrono_literals;

TEST(DetectorE2E, WithDigestAuthAndAclsStrangersCannotTouchLocksOrForgeRecordsButTheDetectorRevokes) {
  test::ZkServer server;  // own server: /zklock's ACLs are the subject
  server.start();
  const auto zk = server.connect_string();
  const auto root = "/secure-locks";
  const auto x = std::string(root) + "/x", y = std::string(root) + "/y";
  const DigestCredentials admin{"admin", "admin-pw"}, alice{"alice", "alice-pw"}, bob{"bob", "bob-pw"},
      detector{"detector", "detector-pw"}, inspector{"inspector", "inspector-pw"};
  auto id = [](const DigestCredentials& c) { return digest_acl_id(c.user, c.password); };
  constexpr int lock_user = perm::read | perm::create | perm::remove | perm::write;
  // Lock parents: the lock users and the detector create, delete, write (and
  // list); inspectors read; nobody else anything.
  const std::vector<AclEntry> lock_parent_acl{{"digest", id(admin), perm::all},
                                              {"digest", id(alice), lock_user},
                                              {"digest", id(bob), lock_user},
                                              {"digest", id(detector), lock_user},
                                              {"digest", id(inspector), perm::read}};
  // /zklock/revocations and /zklock/detector: the detector (and the admin) write; anyone reads.
  const std::vector<AclEntry> detector_only_acl{{"digest", id(admin), perm::all},
                                                {"digest", id(detector), perm::all},
                                                {"world", "anyone", perm::read}};
  const std::vector<AclEntry> admin_world_read{{"digest", id(admin), perm::all}, {"world", "anyone", perm::read}};
  {
    auto o = session(zk, admin);
    o.acl = admin_world_read;
    Client setup(o);
    setup.ensure_path("/zklock", CreateMode::persistent);
    setup.ensemble_id();  // /zklock/ensemble-id, world-readable
    o.acl = detector_only_acl;
    Client setup2(o);
    setup2.ensure_path(std::string(protocol::kRevocationsPath), CreateMode::persistent);
    setup2.ensure_path(std::string(kElectionPath), CreateMode::persistent);
    o.acl = lock_parent_acl;
    Client setup3(o);
    setup3.ensure_path(x, CreateMode::persistent);
    setup3.ensure_path(y, CreateMode::persistent);
  }

  TempDir dir;
  const auto auth_file = dir.path() / "detector.auth";
  std::ofstream(auth_file) << detector.user << ":" << detector.password << "\n";
  auto args = detector_args(zk, root, "secure-detector");
  args.insert(args.end(), {"--auth-file", auth_file.string()});
  DetectorProcess det(dir.path(), "detector", args);
  ASSERT_TRUE(det.wait_line({"now the leader"}, 20s)) << det.log();

  Client ca(session(zk, alice)), cb(session(zk, bob)), stranger(session(zk)), cb2(session(zk, bob)),
      look(session(zk, inspector));
  Actor a(ca, "alice"), b(cb, "bob");
  a.hold(x);
  const auto alice_node = a.leases()[0].node_path();

  auto code = [](auto&& op) -> std::optional<Errc> {
    try {
      op();
    } catch (const Error& e) {
      return e.code();
    }
    return std::nullopt;
  };
  auto async_status = [](auto start) {
    std::promise<Status> p;
    start([&p](Status s) { p.set_value(s); });
    auto f = p.get_future();
    require(f.wait_for(10s) == std::future_status::ready, "no answer within 10 s");
    return f.get();
  };

  // The stranger (no credentials) cannot take a lock...
  FairMutex strangers_x(stranger, x);
  EXPECT_EQ(code([&] { (void)strangers_x.try_acquire_for(5s, {.owner = "mallory"}); }), Errc::no_auth);
  // ...nor create a node under a lock parent directly, nor list it...
  const auto forged_name = protocol::lock_node_prefix(Mode::exclusive, protocol::owner_key("mallory"), protocol::new_guid());
  EXPECT_TRUE(async_status([&](auto done) {
                stranger.create_async(x + "/" + forged_name, "", CreateMode::ephemeral_sequential,
                                      [done](Status s, const std::string&, const Stat&) { done(s); });
              }).is(Errc::no_auth));
  EXPECT_EQ(code([&] { stranger.children(x); }), Errc::no_auth);
  // ...nor delete alice's node...
  EXPECT_TRUE(async_status([&](auto done) { stranger.remove_async(alice_node, -1, done); }).is(Errc::no_auth));
  // ...nor revoke it the way the detector does...
  protocol::RevocationRequest req;
  req.victims = {{alice_node, "alice", 0}};
  req.checks = {alice_node};
  req.record.policy = "operator";
  req.record.detector = "mallory";
  req.record.reason = "forged";
  const auto forged = revoke(stranger, req);
  EXPECT_EQ(forged.outcome, protocol::RevokeOutcome::failed) << forged.detail;
  EXPECT_TRUE(forged.status.is(Errc::no_auth)) << forged.detail;
  // ...nor forge a revocation record, and neither can an authenticated lock user.
  protocol::RevocationRecord fake;
  fake.victim_node = alice_node;
  fake.policy = "youngest";
  fake.detector = "mallory";
  for (Client* c : {&stranger, &cb2}) {
    EXPECT_TRUE(async_status([&](auto done) {
                  c->create_async(protocol::revocation_record_path(alice_node), protocol::encode_revocation_record(fake),
                                  CreateMode::persistent,
                                  [done](Status s, const std::string&, const Stat&) { done(s); });
                }).is(Errc::no_auth));
  }
  // An inspector reads but cannot create.
  EXPECT_EQ(look.children(x).size(), 1u);
  EXPECT_TRUE(async_status([&](auto done) {
                look.create_async(x + "/" + forged_name, "", CreateMode::ephemeral_sequential,
                                  [done](Status s, const std::string&, const Stat&) { done(s); });
              }).is(Errc::no_auth));
  EXPECT_TRUE(ca.try_stat(alice_node)) << "alice's node survived every attempt";
  EXPECT_FALSE(ca.try_stat(protocol::revocation_record_path(alice_node)));

  // The detector, authenticated, does revoke a real deadlock.
  b.hold(y);
  auto a_waits = a.enqueue(y);
  const auto closed = Clock::now();
  auto b_waits = b.enqueue(x);
  const auto bound = latency_bound(500ms, 200ms);
  expect_victim(b_waits, closed, "alice -[" + y + "]-> bob -[" + x + "]-> alice", bound, "secure");
  EXPECT_NE(b_waits.message().find("deadlock detector secure-detector"), std::string::npos) << b_waits.message();
  b.release_all();
  expect_granted(a_waits, "alice");
  a.keep(a_waits);
  const auto line = det.wait_line({"outcome revoked"}, 5s);
  ASSERT_TRUE(line) << det.log();
  print_logged_latency(*line, bound, "secure");

  // The documented limit: an authenticated lock user may delete anyone's
  // node under a lock parent it may use (ZooKeeper checks DELETE on the
  // parent only). Alice's lease hears about it at once.
  auto lost = std::make_shared<std::promise<std::string>>();
  a.leases()[0].on_lost([lost](LossReason, const std::string& d) { lost->set_value(d); });
  EXPECT_TRUE(async_status([&](auto done) { cb2.remove_async(alice_node, -1, done); }).ok());
  auto f = lost->get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  EXPECT_NE(f.get().find("no revocation record"), std::string::npos);
  EXPECT_EQ(det.child().terminate(5s).describe(), "exit 0");
}

}  // namespace
}  // namespace zklock::detector
