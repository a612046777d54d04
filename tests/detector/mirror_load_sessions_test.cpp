// The mirror's load over several sessions (MirrorOptions::load_sessions)
// against a real server: every directory is mirrored, the directories are
// spread over the load sessions, and each path's watch is set by exactly
// one session and accounted to that one only (the server's count of
// children watches is the witness).
#include <gtest/gtest.h>

#include <sstream>
#include <string>

#include "detector/mirror.hpp"
#include "detector_fixtures.hpp"
#include "zk_harness.hpp"

namespace zklock::detector {
namespace {

using namespace planted;
using namespace std::chrono_literals;

// Children watches on the server: mntr's zk_watch_count (data and children
// watches, one per path and watching session) less the data watches that
// `wchp` lists (3.8 lists data watches only, each session on a tab line).
std::int64_t children_watches() {
  auto& server = test::shared_server();
  const auto all = server.mntr().counter("zk_watch_count").value_or(-1);
  const auto text = test::four_letter_word("127.0.0.1", server.port(), "wchp");
  if (!text) throw std::runtime_error("wchp: no answer");
  std::int64_t data = 0;
  std::istringstream in(*text);
  for (std::string line; std::getline(in, line);) data += !line.empty() && line[0] == '\t';
  return all - data;
}

TEST(Mirror, ALoadOverSeveralSessionsMirrorsEveryPathAndAccountsEachWatchOnce) {
  const auto root = test::unique_path("mirror-load-sessions");
  constexpr int kDirs = 60;
  Owner a("A");
  for (int i = 0; i < kDirs; ++i) a.hold(root + "/l" + std::to_string(i));

  const auto watches_before = children_watches();
  Client client(ClientOptions{.connect = test::shared_server().connect_string(), .session_timeout = 6s});
  Mirror mirror(client, MirrorOptions{.root = root, .load_sessions = 3});
  mirror.start();
  ASSERT_TRUE(test::eventually([&] { return mirror.stats().nodes == kDirs && mirror.idle(); }, 10s))
      << mirror.stats().nodes << " of " << kDirs << " nodes mirrored";
  const auto st = mirror.stats();
  EXPECT_EQ(st.dirs, kDirs + 1u);
  ASSERT_EQ(st.session_watch_bytes.size(), 3u) << "the load sessions, and no more: the budget is far off";
  std::size_t total = 0;
  for (auto b : st.session_watch_bytes) {
    EXPECT_GT(b, 0u) << "every load session took a share of the directories";
    total += b;
  }
  std::size_t expected = 2 * (4 + root.size());  // the root: its children watch and its exists watch
  for (int i = 0; i < kDirs; ++i) expected += 4 + root.size() + 2 + std::to_string(i).size();
  EXPECT_EQ(total, expected) << "each directory's watch is accounted to one session, once";

  // On the server: one children watch per directory, over all sessions (a
  // path watched by two sessions would count twice).
  EXPECT_EQ(children_watches() - watches_before, kDirs + 1);

  // A change on any session's directory is still seen through its watch.
  a.hold(root + "/l" + std::to_string(kDirs - 1));
  a.hold(root + "/new");
  ASSERT_TRUE(test::eventually([&] { return mirror.stats().nodes == kDirs + 2 && mirror.idle(); }, 10s));
  EXPECT_EQ(mirror.stats().session_watch_bytes.size(), 3u);
}

}  // namespace
}  // namespace zklock::detector
