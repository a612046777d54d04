// Inspection: `ls`, `queue`, `cycles` and `graph` over live queues, text and
// JSON, and over a tree these credentials can read only part of.
#include <thread>

#include "cli_fixture.hpp"

namespace zklock::cli_test {

TEST_F(CliTest, LsOfAMissingRootIsEmpty) {
  auto r = zklock({"ls"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_NE(r.out.find("no locks under " + root_), std::string::npos) << r.out;
  r = zklock({"ls", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  const auto j = json::parse(r.out);
  EXPECT_EQ(j["root"], root_);
  EXPECT_TRUE(j["locks"].empty());
  r = zklock({"cycles", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_TRUE(json::parse(r.out)["cycles"].empty());
  r = zklock({"graph", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_TRUE(json::parse(r.out)["locks"].empty());
}

TEST_F(CliTest, LsAndQueueShowHoldersWaitersAndForeignChildren) {
  const auto gate = dir_ / "gate";
  // Node i was created after spawned[i] and before seen[i], in wall-clock
  // milliseconds: the clock of ZooKeeper's ctime and of the CLI's "now" (one
  // machine). They bound the ages the CLI reports.
  std::int64_t spawned[3], seen[3];
  spawned[0] = wall_ms();
  auto& holder = exec_background("jobs/a", "echo held; " + wait_gate(gate), {"--owner", "alice"});
  ASSERT_TRUE(holder.read_until("held", 20s)) << "holder never ran";
  seen[0] = spawned[1] = wall_ms();
  exec_background("jobs/a", "true", {"--owner", "bob"}, {}, false);
  ASSERT_TRUE(wait_queue_size("jobs/a", 2));
  seen[1] = spawned[2] = wall_ms();
  exec_background("jobs/a", "true", {}, {{"ZKLOCK_OWNER", "carol"}}, false);
  ASSERT_TRUE(wait_queue_size("jobs/a", 3));
  seen[2] = wall_ms();
  // Let every node age 300 ms: an age clamped to 0, or counted in the wrong
  // unit, cannot pass the bounds below.
  std::this_thread::sleep_for(300ms);
  // A foreign child, which the recipe ignores and the CLI lists as such.
  auto handle = test::ZkHandle::connect(zk_);
  ASSERT_EQ(handle.create(root_ + "/jobs/a/not-a-lock-node", "", 0), ZOK);

  // queue --json
  const auto queried_from = wall_ms();
  auto q = queue_json("jobs/a");
  const auto queried_to = wall_ms();
  ASSERT_FALSE(q.is_null());
  EXPECT_EQ(q["lock"], root_ + "/jobs/a");
  EXPECT_EQ(q["holders"], 1);
  EXPECT_EQ(q["waiters"], 2);
  ASSERT_EQ(q["nodes"].size(), 3u);
  const std::vector<std::string> owners{"alice", "bob", "carol"};
  std::int64_t last_czxid = 0;
  for (std::size_t i = 0; i < 3; ++i) {
    const auto& n = q["nodes"][i];
    EXPECT_EQ(n["position"], i + 1);
    EXPECT_EQ(n["owner"], owners[i]);
    EXPECT_EQ(n["state"], i == 0 ? "holds" : "waits");
    EXPECT_EQ(n["mode"], "exclusive");
    EXPECT_EQ(n["path"], root_ + "/jobs/a/" + n["node"].get<std::string>());
    EXPECT_TRUE(n["node"].get<std::string>().starts_with("w_"));
    ASSERT_TRUE(n["token"].is_string());
    EXPECT_EQ(n["token"], q["ensemble_id"].get<std::string>() + ":" + std::to_string(n["czxid"].get<std::int64_t>()));
    EXPECT_GT(n["czxid"].get<std::int64_t>(), last_czxid);
    last_czxid = n["czxid"];
    EXPECT_TRUE(n["session"].get<std::string>().starts_with("0x"));
    // ctime and the CLI's clock are whole milliseconds: 1 ms of slack each way.
    const auto age = n["age_ms"].get<std::int64_t>();
    EXPECT_GE(age, queried_from - seen[i] - 1) << owners[i];
    EXPECT_LE(age, queried_to - spawned[i] + 1) << owners[i];
    EXPECT_EQ(n["description"], "zklock exec sh");
  }
  ASSERT_EQ(q["foreign"].size(), 1u);
  EXPECT_EQ(q["foreign"][0]["node"], "not-a-lock-node");

  // queue, text
  auto r = zklock({"queue", root_ + "/jobs/a"});  // absolute form
  ASSERT_EQ(r.code, 0) << r.describe();
  auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 6u) << r.out;
  EXPECT_EQ(lines[0], root_ + "/jobs/a: 1 holder, 2 waiting, 1 foreign");
  EXPECT_TRUE(squeeze(lines[1]).starts_with("POS STATE MODE OWNER NODE SEQ TOKEN SESSION AGE")) << lines[1];
  EXPECT_TRUE(squeeze(lines[2]).starts_with("1* holds exclusive alice w_")) << lines[2];
  EXPECT_TRUE(squeeze(lines[3]).starts_with("2 waits exclusive bob w_")) << lines[3];
  EXPECT_TRUE(squeeze(lines[4]).starts_with("3 waits exclusive carol w_")) << lines[4];
  EXPECT_EQ(squeeze(lines[5]), "- foreign - - not-a-lock-node - - - -") << lines[5];
  EXPECT_EQ(lines[2].find("holds"), lines[1].find("STATE")) << "columns are aligned";
  EXPECT_NE(r.out.find(q["nodes"][0]["token"].get<std::string>()), std::string::npos);

  // ls, JSON and text
  const auto listed_from = wall_ms();
  r = zklock({"ls", "--json"});
  const auto listed_to = wall_ms();
  ASSERT_EQ(r.code, 0) << r.describe();
  auto j = json::parse(r.out);
  ASSERT_EQ(j["locks"].size(), 1u) << r.out;
  EXPECT_EQ(j["locks"][0]["path"], root_ + "/jobs/a");
  EXPECT_EQ(j["locks"][0]["holders"], 1);
  EXPECT_EQ(j["locks"][0]["holder_owners"], json::array({"alice"}));
  EXPECT_EQ(j["locks"][0]["waiters"], 2);
  EXPECT_EQ(j["locks"][0]["foreign"], 1);
  const auto oldest_wait = j["locks"][0]["oldest_wait_ms"].get<std::int64_t>();  // bob's
  EXPECT_GE(oldest_wait, listed_from - seen[1] - 1);
  EXPECT_LE(oldest_wait, listed_to - spawned[1] + 1);
  r = zklock({"ls"});
  ASSERT_EQ(r.code, 0) << r.describe();
  lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 2u) << r.out;
  EXPECT_TRUE(lines[0].starts_with("LOCK")) << r.out;
  EXPECT_TRUE(squeeze(lines[1]).starts_with(root_ + "/jobs/a 1 2 ")) << r.out;
  EXPECT_TRUE(lines[1].ends_with("alice")) << r.out;
  r = zklock({"ls", "jobs"});  // a sub-path
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_NE(r.out.find(root_ + "/jobs/a"), std::string::npos);

  // graph without cycles
  r = zklock({"graph", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  j = json::parse(r.out);
  EXPECT_EQ(j["waits"].size(), 3u) << r.out;  // bob -> alice, carol -> alice (hard), carol -> bob (soft)
  EXPECT_TRUE(j["cycles"].empty());

  open_gate(gate);
  expect_all_children_exit_0();
}

// A token is its node's czxid, whatever happens to the node's data: zklock
// never writes a lock node after its create (a retained lease's re-take is
// local), so a write by someone else moves the mzxid and nothing `queue`
// shows. Whether a holder's node lies retained idle is known only to its
// process; `queue` does not guess.
TEST_F(CliTest, QueueShowsEachTokenAsItsNodesCzxid) {
  const auto gate = dir_ / "retain-gate";
  auto& holder = exec_background("retained", "echo held; " + wait_gate(gate), {"--owner", "alice"});
  ASSERT_TRUE(holder.read_until("held", 20s)) << "holder never ran";
  exec_background("retained", "true", {"--owner", "bob"}, {}, false);
  ASSERT_TRUE(wait_queue_size("retained", 2));

  auto q = queue_json("retained");
  ASSERT_EQ(q["nodes"].size(), 2u);
  for (const auto& n : q["nodes"]) {
    EXPECT_FALSE(n.contains("retained"));
    EXPECT_FALSE(n.contains("retakes"));
    EXPECT_FALSE(n.contains("mzxid"));
    EXPECT_EQ(n["token"], q["ensemble_id"].get<std::string>() + ":" + std::to_string(n["czxid"].get<std::int64_t>()));
  }
  const auto node = q["nodes"][0]["path"].get<std::string>();

  auto handle = test::ZkHandle::connect(zk_);
  char buf[4096];
  int len = sizeof buf;
  Stat st{};
  ASSERT_EQ(zoo_get(handle.get(), node.c_str(), 0, buf, &len, &st), ZOK);
  ASSERT_EQ(zoo_set(handle.get(), node.c_str(), buf, len, st.version), ZOK);
  Stat after{};
  ASSERT_EQ(handle.exists(node, &after), ZOK);
  ASSERT_GT(after.mzxid, after.czxid);

  q = queue_json("retained");
  ASSERT_EQ(q["nodes"].size(), 2u);
  EXPECT_EQ(q["holders"], 1);
  const auto& h = q["nodes"][0];
  EXPECT_EQ(h["state"], "holds");
  EXPECT_EQ(h["czxid"], st.czxid);
  EXPECT_EQ(h["token"], q["ensemble_id"].get<std::string>() + ":" + std::to_string(st.czxid));
  EXPECT_EQ(q["nodes"][1]["state"], "waits");

  const auto r = zklock({"queue", "retained"});
  ASSERT_EQ(r.code, 0) << r.describe();
  const auto lines = lines_of(r.out);
  ASSERT_EQ(lines.size(), 4u) << r.out;
  EXPECT_EQ(lines[0], root_ + "/retained: 1 holder, 1 waiting");
  EXPECT_TRUE(squeeze(lines[2]).starts_with("1* holds exclusive alice w_")) << lines[2];
  EXPECT_NE(lines[2].find(h["token"].get<std::string>()), std::string::npos) << lines[2];
  EXPECT_TRUE(squeeze(lines[3]).starts_with("2 waits exclusive bob w_")) << lines[3];

  open_gate(gate);
  expect_all_children_exit_0();
}

TEST_F(CliTest, UnreadableDirectoriesAndNodesAreReportedAndTheRestIsShown) {
  auto handle = test::ZkHandle::connect(zk_);
  for (const char* p : {"", "/jobs", "/jobs/a"}) handle.ensure(root_ + p);  // jobs/a: an idle lock anyone may read
  // The admin's session: a directory, and a lock node in an open lock, that
  // only the admin may read.
  auto admin = test::ZkHandle::connect(zk_);
  ASSERT_EQ(zoo_add_auth(admin.get(), "digest", "admin:admin-pw", 14, nullptr, nullptr), ZOK);
  ASSERT_EQ(create_private(admin.get(), root_ + "/secret", 0), ZOK);
  ASSERT_EQ(create_private(admin.get(), root_ + "/secret/x", 0), ZOK);
  handle.ensure(root_ + "/mixed");
  std::string hidden;
  ASSERT_EQ(create_private(admin.get(), root_ + "/mixed/w_0123456789abcdef_0123456789abcdef0123456789abcdef_",
                           ZOO_EPHEMERAL | ZOO_SEQUENCE, &hidden),
            ZOK);
  const auto hidden_name = hidden.substr(hidden.rfind('/') + 1);

  // Text: the readable lock, one line per unreadable part with the reason,
  // a warning on stderr, exit 0.
  auto r = zklock({"ls"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_NE(r.out.find(root_ + "/jobs/a"), std::string::npos) << r.describe();
  EXPECT_NE(r.out.find("unreadable: " + root_ + "/secret: no permission to list its children (NOAUTH)"),
            std::string::npos) << r.describe();
  EXPECT_NE(r.out.find("unreadable: " + root_ + "/mixed: no permission to read its node " + hidden_name + " (NOAUTH)"),
            std::string::npos) << r.describe();
  EXPECT_NE(r.err.find("zklock: warning: partial view: 2 paths could not be read"), std::string::npos)
      << r.describe();

  // JSON: "complete" false and the unreadable paths with the reason.
  r = zklock({"ls", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  auto j = json::parse(r.out);
  EXPECT_EQ(j["complete"], false) << r.out;
  ASSERT_EQ(j["locks"].size(), 1u) << r.out;
  EXPECT_EQ(j["locks"][0]["path"], root_ + "/jobs/a");
  ASSERT_EQ(j["unreadable"].size(), 2u) << r.out;
  EXPECT_EQ(j["unreadable"][0]["path"], root_ + "/mixed");
  EXPECT_EQ(j["unreadable"][1]["path"], root_ + "/secret");
  for (const auto& u : j["unreadable"]) {
    EXPECT_EQ(u["error"], "no_auth");
    EXPECT_NE(u["reason"].get<std::string>().find("NOAUTH"), std::string::npos);
  }

  for (const std::vector<std::string>& args : {std::vector<std::string>{"cycles", "--json"}, {"graph", "--json"}}) {
    r = zklock(args);
    ASSERT_EQ(r.code, 0) << args[0] << r.describe();
    j = json::parse(r.out);
    EXPECT_EQ(j["complete"], false) << r.out;
    EXPECT_EQ(j["unreadable"].size(), 2u) << r.out;
    EXPECT_TRUE(j["cycles"].empty()) << r.out;
  }
  for (const std::vector<std::string>& args : {std::vector<std::string>{"cycles"}, {"graph"}, {"graph", "--format", "dot"}}) {
    r = zklock(args);
    ASSERT_EQ(r.code, 0) << args[0] << r.describe();
    EXPECT_NE(r.out.find(root_ + "/secret"), std::string::npos) << args.back() << r.describe();
    EXPECT_NE(r.out.find("unreadable"), std::string::npos) << args.back() << r.describe();
    EXPECT_NE(r.err.find("partial view"), std::string::npos) << args.back() << r.describe();
  }

  // With the admin's credentials the same tree is complete.
  r = zklock({"ls", "--json", "--auth", "admin:admin-pw"});
  ASSERT_EQ(r.code, 0) << r.describe();
  j = json::parse(r.out);
  EXPECT_EQ(j["complete"], true) << r.out;
  EXPECT_TRUE(j["unreadable"].empty()) << r.out;
  EXPECT_EQ(j["locks"].size(), 3u) << r.out;  // jobs/a, mixed (one waiter-less holder), secret/x
  r = zklock({"ls"}, {{"ZKLOCK_AUTH", "admin:admin-pw"}});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(r.out.find("unreadable"), std::string::npos) << r.describe();
  EXPECT_TRUE(r.err.empty()) << r.describe();
}

}  // namespace zklock::cli_test
