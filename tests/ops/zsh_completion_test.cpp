// zklock's zsh completion (cli/_zklock), driven in a real interactive zsh:
// tests/ops/zsh_complete.zsh types each command line into `zsh -f -i` in a
// pseudo-terminal (zsh/zpty), with cli/ first in fpath and compinit loaded,
// presses TAB and records what the completion system offers. Lock paths
// come from a real server. Skipped, saying so, without zsh (Debian package
// zsh; scripts/install-deps installs it).
#include <unistd.h>

#include <cstdlib>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "zk_harness.hpp"

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::string kSourceDir = ZKLOCK_SOURCE_DIR;

using zklock::test::read_file;

// zsh on PATH, or empty.
std::string find_zsh() {
  const char* path = std::getenv("PATH");
  std::istringstream dirs(path ? path : "");
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    const auto candidate = fs::path(dir.empty() ? "." : dir) / "zsh";
    if (::access(candidate.c_str(), X_OK) == 0) return candidate.string();
  }
  return {};
}

using Set = std::set<std::string>;

class ZshCompletionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    zsh_ = find_zsh();
    if (zsh_.empty()) GTEST_SKIP() << "zsh completion test skipped: zsh not found (Debian package zsh; scripts/install-deps)";
  }

  // What a TAB at the end of each line offers.
  std::vector<Set> complete(const std::vector<std::string>& lines,
                            std::vector<std::pair<std::string, std::string>> env = {}) {
    const auto out = fs::temp_directory_path() / ("zklock-zsh-completion-" + std::to_string(::getpid()) + ".out");
    zklock::test::SpawnOptions so;
    so.argv = {zsh_, "-f", kSourceDir + "/tests/ops/zsh_complete.zsh", kSourceDir + "/cli"};
    so.argv.insert(so.argv.end(), lines.begin(), lines.end());
    env.emplace_back("PATH", fs::path(ZKLOCK_CLI_BINARY).parent_path().string() + ":" + std::getenv("PATH"));
    env.emplace_back("TERM", "dumb");
    so.env = std::move(env);
    so.output_file = out;
    so.capture_stdout = false;
    auto child = zklock::test::ChildProcess::spawn(so);
    const auto status = child.wait_exit(90s);
    const auto text = read_file(out);
    fs::remove(out);
    EXPECT_TRUE(status && status->describe() == "exit 0") << text;

    std::vector<Set> result;
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
      if (line.rfind("@@ ", 0) == 0) {
        result.emplace_back();
        const int n = std::stoi(line.substr(3));
        for (int i = 0; i < n && std::getline(in, line); ++i) result.back().insert(line);
      }
    }
    EXPECT_EQ(result.size(), lines.size()) << text;
    result.resize(lines.size());
    return result;
  }

  std::string zsh_;
};

TEST_F(ZshCompletionTest, SubcommandsOptionsAndValues) {
  const auto r = complete({
      "zklock ",
      "zklock re",
      "zklock --zk 127.0.0.1:1 q",              // the option's value is skipped
      "zklock --ro",
      "zklock graph --format ",                 // fixed choices from --help
      "zklock exec x --",                       // exec's options and the global ones
      "zklock exec x --timeout 5s -- bas",      // CMD after "--"
      "zklock revoke --re",
      "zklock cycles --",
  });
  EXPECT_EQ(r[0], (Set{"ls", "queue", "cycles", "graph", "exec", "revoke", "revocations", "doctor"}));
  EXPECT_EQ(r[1], (Set{"revoke", "revocations"}));
  EXPECT_EQ(r[2], (Set{"queue"}));
  EXPECT_EQ(r[3], (Set{"--root"}));
  EXPECT_EQ(r[4], (Set{"text", "dot", "json", "svg"}));
  for (const char* o : {"--shared", "--timeout", "--owner", "--grace", "--zk", "--json", "--help", "--auth"}) {
    EXPECT_TRUE(r[5].count(o)) << o;
  }
  EXPECT_FALSE(r[5].count("--reason")) << "revoke's option offered for exec";
  EXPECT_TRUE(r[6].count("bash")) << "a command after '--'";
  EXPECT_EQ(r[7], (Set{"--reason"}));
  EXPECT_TRUE(r[8].count("--min-wait"));
  EXPECT_FALSE(r[8].count("--shared"));
}

TEST_F(ZshCompletionTest, LockPathsComeFromTheServer) {
  const auto zk = zklock::test::shared_server().connect_string();
  const auto root = zklock::test::unique_path("zsh-completion");
  auto handle = zklock::test::ZkHandle::connect(zk);
  for (const char* p : {"", "/jobs", "/jobs/a", "/jobs/b", "/other"}) handle.ensure(root + p);

  const auto r = complete({"zklock queue ", "zklock queue jo", "zklock exec /", "zklock --root " + root + " ls o",
                           "zklock revoke jobs/", "zklock ls o", "zklock --root " + root + " queue o"},
                          {{"ZKLOCK_ZK", zk}, {"ZKLOCK_ROOT", root}});
  EXPECT_EQ(r[0], (Set{"jobs/a", "jobs/b", "other"}));
  EXPECT_EQ(r[1], (Set{"jobs/a", "jobs/b"}));
  EXPECT_EQ(r[2], (Set{root + "/jobs/a", root + "/jobs/b", root + "/other"}));
  EXPECT_EQ(r[3], (Set{"other"}));
  EXPECT_EQ(r[4], (Set{"jobs/a/", "jobs/b/"}));
  EXPECT_EQ(r[5], (Set{"other"}));
  EXPECT_EQ(r[6], (Set{"other"}));
}

}  // namespace
