// `zklock doctor`: the server, session, root and ACL checks, and a lock head
// that keeps others waiting past the threshold.
#include <map>

#include "cli_fixture.hpp"

namespace zklock::cli_test {

TEST_F(CliTest, DoctorReportsOnTheServer) {
  auto handle = test::ZkHandle::connect(zk_);
  handle.ensure(root_);
  auto r = zklock({"doctor", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  const auto j = json::parse(r.out);
  EXPECT_EQ(j["ok"], true);
  std::map<std::string, json> by_name;
  for (const auto& c : j["checks"]) by_name[c["name"]] = c;
  const auto server = "server " + zk_;
  ASSERT_TRUE(by_name.count(server)) << r.out;
  EXPECT_EQ(by_name[server]["status"], "ok");
  EXPECT_NE(by_name[server]["detail"].get<std::string>().find("mode standalone"), std::string::npos);
  EXPECT_EQ(by_name["session"]["status"], "ok");
  EXPECT_NE(by_name["session timeout"]["detail"].get<std::string>().find("negotiated"), std::string::npos);
  EXPECT_EQ(by_name["root"]["status"], "ok");
  EXPECT_EQ(by_name["acl"]["status"], "ok") << by_name["acl"].dump();
  EXPECT_TRUE(by_name.count("ensemble id"));
  EXPECT_TRUE(by_name.count("detector"));
  EXPECT_EQ(by_name["session stability"]["status"], "ok") << r.out;
  EXPECT_EQ(by_name["session stability"]["reconnect_loops"], 0) << r.out;
  r = zklock({"doctor"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_TRUE(r.out.starts_with("CHECK")) << r.out;
  EXPECT_NE(r.out.find("mode standalone"), std::string::npos) << r.out;
  // The probe node is gone again.
  std::vector<std::string> children;
  ASSERT_EQ(handle.children(root_, &children), ZOK);
  EXPECT_TRUE(children.empty());
}

// A head that keeps others waiting is reported ("head not taking
// the lock"), counted from the first waiter's arrival and, once the lock
// was handed off, from the hand-off; a head with no waiter never is. The
// tree cannot tell a long hold from a stuck head: these heads hold.
TEST_F(CliTest, DoctorReportsAHeadThatKeepsOthersWaitingPastTheThreshold) {
  const auto lock = root_ + "/jobs/a";
  // The doctor's JSON check for `lock` ("lock <path>"), or null.
  const auto head_check = [&](const RunResult& r) {
    if (r.code != 0) return json();
    const auto j = json::parse(r.out);
    for (const auto& c : j["checks"]) {
      if (c["name"] == "lock " + lock) return c;
    }
    return json();
  };
  const auto doctor = [&] { return zklock({"doctor", "--json", "--head-threshold", "1s"}); };
  const auto gate_a = dir_ / "gate-a", gate_b = dir_ / "gate-b";
  auto& alice = exec_background("jobs/a", "echo held; " + wait_gate(gate_a), {"--owner", "alice"});
  ASSERT_TRUE(alice.read_until("held", 20s)) << "alice never held";

  // Alone at the head, older than the threshold: no finding.
  ASSERT_TRUE(eventually([&] {
    const auto q = queue_json("jobs/a");
    return !q.is_null() && q["nodes"].size() == 1 && q["nodes"][0]["age_ms"].get<std::int64_t>() >= 1500;
  }, 20s));
  auto r = doctor();
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_TRUE(head_check(r).is_null()) << r.out;
  EXPECT_NE(r.out.find("no lock head has kept others waiting for 1s or longer (0 with waiters)"), std::string::npos)
      << r.out;

  // Two waiters behind her: reported once the first has waited 1 s.
  const auto waiters_from = wall_ms();
  auto& bob = exec_background("jobs/a", "echo bob held; " + wait_gate(gate_b), {"--owner", "bob"});
  ASSERT_TRUE(wait_queue_size("jobs/a", 2));
  exec_background("jobs/a", "true", {"--owner", "carol"}, {}, false);
  ASSERT_TRUE(wait_queue_size("jobs/a", 3));
  const auto q = queue_json("jobs/a");
  json found;
  ASSERT_TRUE(eventually([&] { return !(found = head_check(r = doctor())).is_null(); }, 20s)) << r.describe();
  const auto upper = wall_ms() - waiters_from + 2;
  EXPECT_EQ(found["status"], "warn");
  EXPECT_EQ(found["finding"], "head not taking the lock");
  EXPECT_EQ(found["lock"], lock);
  EXPECT_EQ(found["node"], q["nodes"][0]["path"]);
  EXPECT_EQ(found["owner"], "alice");
  EXPECT_EQ(found["session"], q["nodes"][0]["session"]);
  EXPECT_EQ(found["waiters"], 2);
  EXPECT_EQ(found["since_hand_off"], false);
  // From bob's arrival, not from alice's creation (1.5 s earlier at least).
  EXPECT_GE(found["head_ms"].get<std::int64_t>(), 1000);
  EXPECT_LE(found["head_ms"].get<std::int64_t>(), upper);
  const auto detail = found["detail"].get<std::string>();
  EXPECT_TRUE(detail.starts_with("head not taking the lock: " + q["nodes"][0]["node"].get<std::string>() +
                                 " of alice (session " + q["nodes"][0]["session"].get<std::string>() +
                                 ") has had 2 waiting behind it for "))
      << detail;
  EXPECT_TRUE(detail.ends_with(": held or stuck, check the owner")) << detail;
  EXPECT_EQ(json::parse(r.out)["ok"], true) << "a warning, not a failure";
  r = zklock({"doctor", "--head-threshold", "1s"});
  ASSERT_EQ(r.code, 0) << r.describe();
  bool text_found = false;
  for (const auto& l : lines_of(r.out)) {
    if (squeeze(l).starts_with("lock " + lock + " warn head not taking the lock: ")) text_found = true;
  }
  EXPECT_TRUE(text_found) << r.out;
  // A threshold it has not reached yet: no finding.
  r = zklock({"doctor", "--json", "--head-threshold", "1h"});
  EXPECT_TRUE(head_check(r).is_null()) << r.out;

  // Alice hands off to bob, who queued long ago: counted from the hand-off.
  const auto released = wall_ms();
  open_gate(gate_a);
  ASSERT_TRUE(bob.read_until("bob held", 20s)) << "bob never held";
  ASSERT_TRUE(eventually([&] {
    found = head_check(r = doctor());
    return !found.is_null() && found["owner"] == "bob";
  }, 20s)) << r.describe();
  EXPECT_EQ(found["since_hand_off"], true) << found.dump();
  EXPECT_EQ(found["waiters"], 1);
  EXPECT_GE(found["head_ms"].get<std::int64_t>(), 1000);
  EXPECT_LE(found["head_ms"].get<std::int64_t>(), wall_ms() - released + 2) << found.dump();
  EXPECT_NE(found["detail"].get<std::string>().find(" (since the last hand-off)"), std::string::npos);

  open_gate(gate_b);
  expect_all_children_exit_0();
}

}  // namespace zklock::cli_test
