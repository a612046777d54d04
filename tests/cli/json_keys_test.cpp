// The key names of every JSON document `zklock` and zklock-detector emit
// are the ones docs/cli.md and docs/detector.md document. A rename slipped
// through once: a namespace change rewrote the key "cycle_text" to
// "protocol::cycle_text" in `zklock revocations --json` and /api/state, and
// every test passed.
//
// Each document is read from the real binaries over a real server, from a
// tree where every key has something to say (a two-owner cycle, a foreign
// child, a part the CLI may not read, a revocation record), and compared with
// its doc both ways:
//   - every key it emits is in its section of the doc, or in a section that
//     section refers to ("as in cycles", "as for ls");
//   - every key its own section shows, it emits.
#include <set>
#include <string>
#include <vector>

#include "cli_fixture.hpp"
#include "doc_keys.hpp"
#include "http_get.hpp"
#include "zklock/client.hpp"
#include "zklock/path.hpp"
#include "zklock/protocol/node_data.hpp"
#include "zklock/protocol/node_name.hpp"
#include "zklock/protocol/revoke.hpp"

namespace zklock::cli_test {
namespace {

using test::doc_keys;
using test::doc_section;
using test::json_keys;
using test::missing_from;

std::set<std::string> keys_of(std::initializer_list<std::string> texts) {
  std::set<std::string> out;
  for (const auto& t : texts) out.merge(doc_keys(t));
  return out;
}

// `emitted` against the doc: everything in `allowed`, everything of `own`.
void expect_documented(const std::string& what, const std::set<std::string>& emitted,
                       const std::set<std::string>& own, std::set<std::string> allowed) {
  allowed.insert(own.begin(), own.end());
  EXPECT_TRUE(std::includes(allowed.begin(), allowed.end(), emitted.begin(), emitted.end()))
      << what << " emits keys its doc does not name: " << missing_from(emitted, allowed);
  EXPECT_TRUE(std::includes(emitted.begin(), emitted.end(), own.begin(), own.end()))
      << what << "'s doc names keys it does not emit: " << missing_from(own, emitted);
}

class JsonKeysTest : public CliTest {
 protected:
  // Lock nodes in zklock's layout on this session, with full node data.
  std::string plant(const std::string& lock, const std::string& owner) {
    protocol::NodeData d;
    d.owner = owner;
    d.host = "json-keys-test";
    d.pid = 4242;
    d.description = "planted";
    planter_.ensure_path(lock);
    return planter_.create(join_path(lock, protocol::lock_node_prefix(Mode::exclusive, protocol::owner_key(owner),
                                                                      protocol::new_guid())),
                           protocol::encode_node_data(d), CreateMode::ephemeral_sequential);
  }
  // alice holds x and waits for y; bob holds y and waits for x: a cycle.
  // x has a foreign child. Two records: z's node revoked by `zklock revoke`
  // (its --json output is returned), w's by the detector's call with a
  // cycle in its record.
  json plant_cycle_and_revoke() {
    plant(root_ + "/x", "alice");
    plant(root_ + "/y", "bob");
    plant(root_ + "/x", "bob");
    plant(root_ + "/y", "alice");
    planter_.create(root_ + "/x/not-a-lock-node");
    protocol::RevocationRequest req;
    const auto w = plant(root_ + "/w", "dave");
    req.victims.push_back({w, "dave"});
    req.record.cycle = {{"dave", root_ + "/w", w}, {"erin", root_ + "/v", root_ + "/v/w_erin"}};
    req.record.policy = "youngest";
    req.record.mode = "wait";
    req.record.detector = "json-keys-test";
    req.record.time_ms = wall_ms();
    EXPECT_EQ(protocol::revoke(planter_, req, 10s).outcome, protocol::RevokeOutcome::revoked);
    const auto victim = plant(root_ + "/z", "carol");
    const auto r = zklock({"revoke", victim, "--reason", "json keys test", "--json"});
    EXPECT_EQ(r.code, 0) << r.describe();
    return json::parse(r.out, nullptr, false);
  }
  json run_json(const std::vector<std::string>& args) {
    const auto r = zklock(args);
    EXPECT_EQ(r.code, 0) << r.describe();
    return json::parse(r.out, nullptr, false);
  }

  Client planter_{[this] {
    ClientOptions o;
    o.connect = test::shared_server().connect_string();
    return o;
  }()};
};

TEST_F(JsonKeysTest, EveryCliDocumentHasTheKeysOfDocsCli) {
  const auto revoked = plant_cycle_and_revoke();
  // A directory only the admin may read: the partial view's keys.
  auto admin = test::ZkHandle::connect(zk_);
  ASSERT_EQ(zoo_add_auth(admin.get(), "digest", "admin:admin-pw", 14, nullptr, nullptr), ZOK);
  ASSERT_EQ(create_private(admin.get(), root_ + "/secret", 0), ZOK);

  const auto doc = test::read_doc("cli.md");
  const auto ls = doc_section(doc, "### `zklock ls");
  const auto cycles = doc_section(doc, "### `zklock cycles");

  const auto ls_json = run_json({"ls", "--json"});
  ASSERT_EQ(ls_json["unreadable"].size(), 1u) << ls_json;
  expect_documented("ls", json_keys(ls_json), doc_keys(ls), {});

  expect_documented("queue", json_keys(run_json({"queue", "x", "--json"})),
                    doc_keys(doc_section(doc, "### `zklock queue")), {});

  const auto cycles_json = run_json({"cycles", "--json"});
  ASSERT_EQ(cycles_json["cycles"].size(), 1u) << cycles_json;
  expect_documented("cycles", json_keys(cycles_json), doc_keys(cycles), keys_of({ls}));

  const auto graph_json = run_json({"graph", "--json"});
  ASSERT_EQ(graph_json["cycles"].size(), 1u) << graph_json;
  expect_documented("graph", json_keys(graph_json), doc_keys(doc_section(doc, "### `zklock graph")),
                    keys_of({ls, cycles}));

  expect_documented("revoke", json_keys(revoked), doc_keys(doc_section(doc, "### `zklock revoke ")), {});

  // The newest two: this test's records, one with a cycle.
  const auto revocations = run_json({"revocations", "--json", "--limit", "2"});
  ASSERT_EQ(revocations["revocations"].size(), 2u) << revocations;
  for (const auto& rec : revocations["revocations"]) {
    ASSERT_TRUE(rec["victim_node"].get<std::string>().starts_with(root_ + "/")) << revocations;
  }
  expect_documented("revocations", json_keys(revocations), doc_keys(doc_section(doc, "### `zklock revocations")), {});

  // Every lock's head has a waiter behind it for more than 0 s: findings.
  const auto r = zklock({"doctor", "--json", "--head-threshold", "0s"});
  ASSERT_NE(r.code, 69) << r.describe();
  const auto doctor = json::parse(r.out, nullptr, false);
  expect_documented("doctor", json_keys(doctor), doc_keys(doc_section(doc, "### `zklock doctor")), {});
}

#ifdef ZKLOCK_DETECTOR_BINARY
TEST_F(JsonKeysTest, DetectorStateAndLogLinesHaveTheKeysOfDocsDetector) {
  plant_cycle_and_revoke();
  const int port = test::free_loopback_port();
  const auto log = dir_ / "detector.log";
  test::SpawnOptions so;
  so.argv = {ZKLOCK_DETECTOR_BINARY, "--zk", zk_, "--root", root_, "--min-wait", "0s", "--interval", "200ms",
             "--dry-run", "--metrics-port", std::to_string(port), "--log-format", "json", "--id", "json-keys-test"};
  so.env_drop_prefixes = {"ZKLOCK_"};
  so.capture_stdout = false;
  so.output_file = log;
  auto& detector = background(so);

  // A scan after the first look reads the revocation records.
  json state;
  ASSERT_TRUE(eventually([&] {
    const auto a = test::http_get(port, "/api/state");
    if (!a) return false;
    state = json::parse(a->body, nullptr, false);
    return state.is_object() && state["revocations_read"] == true && !state["revocations"].empty() &&
           state["cycles"].size() == 1;
  }, 20s)) << state << "\n" << read_file(log);

  const auto doc = test::read_doc("detector.md");
  const auto api = test::doc_between(doc, "**`GET /api/state`**", "\n```\n\n");
  expect_documented("/api/state", json_keys(state), doc_keys(api), {});

  detector.terminate(5s);
  std::set<std::string> logged;
  for (const auto& line : lines_of(read_file(log))) {
    const auto j = json::parse(line, nullptr, false);
    ASSERT_TRUE(j.is_object()) << "not a JSON line: " << line;
    logged.merge(json_keys(j));
  }
  ASSERT_FALSE(logged.empty()) << "the detector logged nothing";
  expect_documented("--log-format json", logged, doc_keys(doc_section(doc, "### Log lines")), {});
}
#endif

}  // namespace
}  // namespace zklock::cli_test
