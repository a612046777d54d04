// The one rendering of a revocation record (model::revocation_json, for
// `zklock revocations --json` and /api/state) has exactly the keys
// docs/cli.md and docs/detector.md show, without a server.
// tests/cli/json_keys_test.cpp checks every document the binaries emit.
#include <gtest/gtest.h>

#include <set>
#include <string>

#include <nlohmann/json.hpp>

#include "doc_keys.hpp"
#include "model/wait_for_graph.hpp"

namespace zklock::model {
namespace {

nlohmann::json a_revocation() {
  protocol::RevocationRecord r;
  r.victim_node = "/locks/x/w_b";
  r.victim_owner = "b";
  r.victim_token = "e:27";
  r.cycle = {{"a", "/locks/y", "/locks/y/w_a"}, {"b", "/locks/x", "/locks/x/w_b"}};
  r.policy = "youngest";
  r.mode = "wait";
  r.detector = "host/1";
  r.time_ms = 1;
  return revocation_json("/zklock/revocations/w_b", r);
}

TEST(JsonKeys, RevocationsAreTheOnesDocsCliShows) {
  auto j = a_revocation();
  j["valid"] = true;  // cmd_revocations adds it
  std::set<std::string> ours{"revocations"};
  test::collect_keys(j, ours);
  const auto doc = test::doc_keys(test::doc_section(test::read_doc("cli.md"), "### `zklock revocations"));
  EXPECT_EQ(ours, doc);
}

TEST(JsonKeys, RevocationsAreTheOnesDocsDetectorShows) {
  const auto ours = test::json_keys(a_revocation());
  const auto api = test::doc_between(test::read_doc("detector.md"), "**`GET /api/state`**", "\n```\n\n");
  // The records' keys: from "revocations" up to the next top-level key.
  const auto doc = test::doc_keys("`" + test::doc_between(api, "\"revocations\": [", "\"revocations_read\"") + "`");
  std::set<std::string> want = doc;
  want.erase("revocations");
  EXPECT_EQ(ours, want);
}

}  // namespace
}  // namespace zklock::model
