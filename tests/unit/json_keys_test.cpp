// The key names of the JSON the CLI and the detector render through lib/model
// are a contract (docs/cli.md, docs/detector.md): each rendering's keys must
// be exactly the documented example's. A rename slipped through once: a
// namespace change rewrote the key "cycle_text" to "protocol::cycle_text" in
// `zklock revocations --json` and in /api/state, and every test passed.
#include <gtest/gtest.h>

#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "model/wait_for_graph.hpp"

namespace zklock::model {
namespace {

std::string read_doc(const std::string& name) {
  std::ifstream in(std::string(ZKLOCK_SOURCE_DIR) + "/docs/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().empty()) throw std::runtime_error("cannot read docs/" + name);
  return ss.str();
}

// The text of a documented example: from the first line after `after` that
// contains `start`, up to (not including) the first following line with `end`.
std::string example(const std::string& doc, const std::string& after, const std::string& start,
                    const std::string& end) {
  const auto a = doc.find(after);
  if (a == std::string::npos) throw std::runtime_error("no '" + after + "' in the doc");
  const auto s = doc.find(start, a);
  if (s == std::string::npos) throw std::runtime_error("no '" + start + "' after '" + after + "'");
  const auto e = doc.find(end, s + start.size());
  if (e == std::string::npos) throw std::runtime_error("no '" + end + "' after '" + start + "'");
  return doc.substr(s, e - s);
}

// Every "key": in a documented example (the examples elide values, so they
// are not JSON themselves). Scanned by hand: std::regex trips GCC 12's
// -Wmaybe-uninitialized in the sanitizer builds, where warnings are errors.
std::set<std::string> doc_keys(const std::string& text) {
  std::set<std::string> out;
  for (std::size_t open = text.find('"'); open != std::string::npos; open = text.find('"', open + 1)) {
    const auto close = text.find('"', open + 1);
    if (close == std::string::npos) break;
    auto after = close + 1;
    while (after < text.size() && text[after] == ' ') ++after;
    if (after < text.size() && text[after] == ':') out.insert(text.substr(open + 1, close - open - 1));
    open = close;
  }
  return out;
}

void collect_keys(const nlohmann::json& j, std::set<std::string>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      out.insert(k);
      collect_keys(v, out);
    }
  } else if (j.is_array()) {
    for (const auto& v : j) collect_keys(v, out);
  }
}

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
  collect_keys(j, ours);
  const auto doc = doc_keys(example(read_doc("cli.md"), "`--json`:", "{\"revocations\"", "```"));
  EXPECT_EQ(ours, doc);
}

TEST(JsonKeys, RevocationsAreTheOnesDocsDetectorShows) {
  std::set<std::string> ours;
  collect_keys(a_revocation(), ours);
  const auto doc = doc_keys(example(read_doc("detector.md"), "\"cycles\": [{", "\"revocations\": [", "\"revocations_read\""));
  std::set<std::string> want = doc;
  want.erase("revocations");
  EXPECT_EQ(ours, want);
}

}  // namespace
}  // namespace zklock::model
