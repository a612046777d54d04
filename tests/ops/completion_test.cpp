// zklock's bash completion (cli/zklock.bash-completion), driven in a bash
// subprocess the way bash does it: COMP_WORDS/COMP_CWORD set, _zklock
// called, COMPREPLY read. Lock paths come from a real server.
#include <map>
#include <set>
#include <sstream>
#include <string>

#include <gtest/gtest.h>

#include "zk_harness.hpp"

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

const std::string kCompletion = std::string(ZKLOCK_SOURCE_DIR) + "/cli/zklock.bash-completion";

using zklock::test::read_file;

std::string quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) out += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return out + "'";
}

class CompletionTest : public ::testing::Test {
 protected:
  // Runs _zklock for each command line (the last word is the one being
  // completed) and returns the candidates of each.
  std::vector<std::set<std::string>> complete(const std::vector<std::vector<std::string>>& lines,
                                              std::vector<std::pair<std::string, std::string>> env = {}) {
    std::string script = "set -u\nsource " + quote(kCompletion) + "\ncomplete -p zklock\n";
    script +=
        "comp() { COMP_WORDS=(\"$@\"); COMP_CWORD=$(($# - 1)); COMP_LINE=\"$*\"; COMP_POINT=${#COMP_LINE};\n"
        "  COMPREPLY=(); _zklock; echo \"@@ ${#COMPREPLY[@]}\"; printf '%s\\n' \"${COMPREPLY[@]}\"; }\n";
    for (const auto& words : lines) {
      script += "comp";
      for (const auto& w : words) script += " " + quote(w);
      script += "\n";
    }
    const auto out = fs::temp_directory_path() / ("zklock-completion-" + std::to_string(::getpid()) + ".out");
    zklock::test::SpawnOptions so;
    so.argv = {"bash", "--norc", "--noprofile", "-c", script};
    env.emplace_back("PATH", fs::path(ZKLOCK_CLI_BINARY).parent_path().string() + ":" + std::getenv("PATH"));
    so.env = std::move(env);
    so.output_file = out;
    so.capture_stdout = false;
    auto bash = zklock::test::ChildProcess::spawn(so);
    const auto status = bash.wait_exit(60s);
    const auto text = read_file(out);
    fs::remove(out);
    EXPECT_TRUE(status && status->describe() == "exit 0") << text;
    complete_p_ = text.substr(0, text.find('\n'));

    std::vector<std::set<std::string>> result;
    std::istringstream in(text);
    std::string line;
    std::getline(in, line);  // complete -p
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
  std::string complete_p_;
};

using Set = std::set<std::string>;

TEST_F(CompletionTest, SubcommandsOptionsAndValues) {
  const auto r = complete({
      {"zklock", ""},
      {"zklock", "re"},
      {"zklock", "--zk", "127.0.0.1:1", "q"},         // the option's value is skipped
      {"zklock", "--ro"},
      {"zklock", "graph", "--format", ""},            // fixed choices from --help
      {"zklock", "exec", "x", "--"},                  // exec's options and the global ones
      {"zklock", "exec", "x", "--timeout", "5s", "--", "bas"},  // CMD after "--"
      {"zklock", "revoke", "--re"},
      {"zklock", "exec", "x", "--timeout", ""},       // a duration: nothing to offer
  });
  EXPECT_NE(complete_p_.find("-F _zklock"), std::string::npos) << complete_p_;
  EXPECT_EQ(r[0], (Set{"ls", "queue", "cycles", "graph", "exec", "revoke", "revocations", "doctor"}));
  EXPECT_EQ(r[1], (Set{"revoke", "revocations"}));
  EXPECT_EQ(r[2], (Set{"queue"}));
  EXPECT_EQ(r[3], (Set{"--root"}));
  EXPECT_EQ(r[4], (Set{"text", "dot", "json", "svg"}));
  for (const char* o : {"--shared", "--timeout", "--owner", "--grace", "--zk", "--json", "--help"}) {
    EXPECT_TRUE(r[5].count(o)) << o;
  }
  EXPECT_TRUE(r[6].count("bash")) << "a command after '--'";
  EXPECT_EQ(r[7], (Set{"--reason"}));
  EXPECT_TRUE(r[8].empty());
}

TEST_F(CompletionTest, LockPathsComeFromTheServer) {
  const auto zk = zklock::test::shared_server().connect_string();
  const auto root = zklock::test::unique_path("completion");
  auto handle = zklock::test::ZkHandle::connect(zk);
  for (const char* p : {"", "/jobs", "/jobs/a", "/jobs/b", "/other"}) handle.ensure(root + p);

  const auto r = complete({{"zklock", "queue", ""},
                           {"zklock", "queue", "jo"},
                           {"zklock", "exec", "/"},
                           {"zklock", "--root", root, "ls", "o"},
                           {"zklock", "revoke", "jobs/"}},
                          {{"ZKLOCK_ZK", zk}, {"ZKLOCK_ROOT", root}});
  EXPECT_EQ(r[0], (Set{"jobs/a", "jobs/b", "other"}));
  EXPECT_EQ(r[1], (Set{"jobs/a", "jobs/b"}));
  EXPECT_EQ(r[2], (Set{root + "/jobs/a", root + "/jobs/b", root + "/other"}));
  EXPECT_EQ(r[3], (Set{"other"}));
  EXPECT_EQ(r[4], (Set{"jobs/a/", "jobs/b/"}));
}

TEST_F(CompletionTest, AnUnreachableServerOffersNoPathsQuickly) {
  const auto start = std::chrono::steady_clock::now();
  const auto r = complete({{"zklock", "queue", ""}},
                          {{"ZKLOCK_ZK", "127.0.0.1:" + std::to_string(zklock::test::free_loopback_port())}});
  EXPECT_TRUE(r[0].empty());
  EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
}

}  // namespace
