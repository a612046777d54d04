// Bad input: usage errors (64) before any connection, help, an unreachable
// server (69), a missing lock or path (66), revoke of what is not a lock node.
#include <filesystem>

#include "cli_fixture.hpp"

namespace zklock::cli_test {

TEST_F(CliTest, UsageErrorsExit64QuicklyWithAHint) {
  // A closed port: usage errors must be reported before any connection attempt.
  const Env unreachable = unreachable_server();
  const std::vector<std::vector<std::string>> cases = {
      {"frobnicate"},
      {},
      {"queue"},
      {"exec", "x"},
      {"revoke", "x/w_0123456789abcdef_0123456789abcdef0123456789abcdef_0000000001"},
      {"queue", "bad//path"},
      {"queue", "/locks/x/"},
      {"queue", "a/../b"},
      {"ls", "bad//path"},
      {"exec", "a/../b", "--", "true"},
      {"exec", "x", "--timeout", "5x", "--", "true"},
      {"exec", "--", "sh", "-c", "true"},
      {"--connect-timeout", "soon", "ls"},
      {"ls", "--no-such-flag"},
      {"graph", "--format", "png"},
      {"queue", "/zklock/revocations"},
  };
  for (const auto& args : cases) {
    auto a = args;
    a.insert(a.begin(), kZklock);
    const auto r = run(a, unreachable, 10s);
    std::string joined;
    for (const auto& s : args) joined += s + " ";
    EXPECT_EQ(r.code, 64) << joined << r.describe();
    EXPECT_LT(r.took, 1000ms) << joined;
    EXPECT_TRUE(r.out.empty()) << joined << r.describe();
    EXPECT_EQ(r.err.rfind("zklock: ", 0), 0u) << joined << r.describe();
    EXPECT_LE(lines_of(r.err).size(), 2u) << joined << r.describe();
  }
  const auto unknown = zklock({"frobnicate"});
  EXPECT_NE(unknown.err.find("unknown subcommand 'frobnicate'"), std::string::npos) << unknown.describe();
  EXPECT_NE(unknown.err.find("zklock --help"), std::string::npos) << unknown.describe();
  const auto bad = zklock({"queue", "bad//path"});
  EXPECT_NE(bad.err.find("bad//path"), std::string::npos) << bad.describe();
}

TEST_F(CliTest, HelpListsSubcommandsAndExitCodes) {
  const auto r = zklock({"--help"});
  ASSERT_EQ(r.code, 0) << r.describe();
  for (const char* s : {"ls", "queue", "cycles", "graph", "exec", "revoke", "revocations", "doctor", "64", "66", "69",
                        "73", "74", "75"}) {
    EXPECT_NE(r.out.find(s), std::string::npos) << s;
  }
  const auto e = zklock({"exec", "--help"});
  EXPECT_EQ(e.code, 0);
  EXPECT_NE(e.out.find("ZKLOCK_TOKEN"), std::string::npos);
}

TEST_F(CliTest, UnreachableServerExits69WithinTheConnectTimeout) {
  const Env unreachable = unreachable_server();
  const std::vector<std::vector<std::string>> cases = {
      {"ls"}, {"queue", "x"}, {"cycles"}, {"graph"}, {"revocations"}, {"exec", "x", "--", "true"},
      {"revoke", "x/w_0123456789abcdef_0123456789abcdef0123456789abcdef_0000000001", "--reason", "r"}, {"doctor"}};
  for (auto args : cases) {
    args.insert(args.begin(), {kZklock, "--connect-timeout", "1s"});
    const auto r = run(args, unreachable, 10s);
    EXPECT_EQ(r.code, 69) << args[3] << r.describe();
    EXPECT_LT(r.took, 2000ms) << args[3];
    EXPECT_GE(r.took, 900ms) << args[3];
    if (args[3] != "doctor") {
      EXPECT_EQ(lines_of(r.err).size(), 1u) << r.describe();
      EXPECT_NE(r.err.find("not reachable within 1s"), std::string::npos) << r.describe();
    }
  }
}

TEST_F(CliTest, MissingLockOrPathExits66) {
  auto r = zklock({"queue", "nothere"});
  EXPECT_EQ(r.code, 66) << r.describe();
  EXPECT_NE(r.err.find(root_ + "/nothere"), std::string::npos) << r.describe();
  r = zklock({"ls", "nothere"});
  EXPECT_EQ(r.code, 66) << r.describe();
  r = zklock({"cycles", "nothere"});
  EXPECT_EQ(r.code, 66) << r.describe();
  r = zklock({"revoke", "x/w_0123456789abcdef_0123456789abcdef0123456789abcdef_0000000001", "--reason", "gone"});
  EXPECT_EQ(r.code, 66) << r.describe();
}

TEST_F(CliTest, RevokeRefusesNodesThatAreNotLockNodes) {
  auto handle = test::ZkHandle::connect(zk_);
  handle.ensure(root_);
  ASSERT_EQ(handle.create(root_ + "/plain", "", 0), ZOK);
  const auto r = zklock({"revoke", "plain", "--reason", "x"});
  EXPECT_EQ(r.code, 64) << r.describe();
  EXPECT_EQ(handle.exists(root_ + "/plain"), ZOK);
}

TEST_F(CliTest, ExecWithoutALockBeforeTheSeparatorIsAUsageError) {
  const auto marker = dir_ / "ran";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"exec", "--", "sh", "-c", "touch '" + marker.string() + "'"},
        {"exec", "--timeout", "5s", "--", "sh", "-c", "touch '" + marker.string() + "'"},
        {"exec", "--shared", "--", "touch", marker.string()}}) {
    const auto r = zklock(args);
    EXPECT_EQ(r.code, 64) << r.describe();
    EXPECT_NE(r.err.find("LOCK must come before '--'"), std::string::npos) << r.describe();
    EXPECT_TRUE(r.out.empty()) << r.describe();
  }
  EXPECT_FALSE(std::filesystem::exists(marker)) << "CMD must not run";
  // The lock named before "--" still works, with or without options between.
  const auto r = zklock({"exec", "x", "--timeout", "5s", "--", "sh", "-c", "touch '" + marker.string() + "'"});
  EXPECT_EQ(r.code, 0) << r.describe();
  EXPECT_TRUE(std::filesystem::exists(marker));
}

TEST_F(CliTest, DoctorRejectsABadHeadThresholdBeforeConnecting) {
  const Env unreachable = unreachable_server();
  const auto r = zklock({"doctor", "--head-threshold", "soon"}, unreachable);
  EXPECT_EQ(r.code, 64) << r.describe();
  EXPECT_LT(r.took, 3s) << r.describe();
}

}  // namespace zklock::cli_test
