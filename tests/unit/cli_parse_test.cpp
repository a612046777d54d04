// The CLI's pure helpers: durations, path resolution, ages, tables, exit codes,
// exec's LOCK-before-"--" rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include <CLI/CLI.hpp>

#include "cli/common.hpp"

namespace zklock::cli {
namespace {

using std::chrono::milliseconds;

int usage_code_of(auto&& fn) {
  try {
    fn();
  } catch (const CliError& e) {
    return e.exit_code();
  }
  return 0;
}

TEST(CliDuration, AcceptsUnitsAndBareSeconds) {
  EXPECT_EQ(parse_duration("500ms"), milliseconds(500));
  EXPECT_EQ(parse_duration("5s"), milliseconds(5000));
  EXPECT_EQ(parse_duration("2m"), milliseconds(120000));
  EXPECT_EQ(parse_duration("1h"), milliseconds(3600000));
  EXPECT_EQ(parse_duration("3"), milliseconds(3000));
  EXPECT_EQ(parse_duration("0.5"), milliseconds(500));
  EXPECT_EQ(parse_duration("1.5s"), milliseconds(1500));
  EXPECT_EQ(parse_duration("0"), milliseconds(0));
  EXPECT_EQ(parse_duration("0ms"), milliseconds(0));
}

TEST(CliDuration, RejectsEverythingElseAsUsageError) {
  for (const char* bad : {"", "ms", "s", "-1", "-5s", "5x", "5 s", " 5s", "5S", "1..2", ".", "1e3", "5sec", "9999999h"}) {
    EXPECT_EQ(usage_code_of([&] { parse_duration(bad); }), exit_code::usage) << "'" << bad << "'";
  }
}

TEST(CliDuration, FormatsTheShortestExactSpelling) {
  EXPECT_EQ(format_duration(milliseconds(500)), "500ms");
  EXPECT_EQ(format_duration(milliseconds(5000)), "5s");
  EXPECT_EQ(format_duration(milliseconds(120000)), "2m");
  EXPECT_EQ(format_duration(milliseconds(1500)), "1500ms");
  EXPECT_EQ(format_duration(milliseconds(7200000)), "2h");
  EXPECT_EQ(format_duration(milliseconds(0)), "0s");
  for (auto ms : {1, 999, 1000, 61000, 60000, 3600000}) {
    EXPECT_EQ(parse_duration(format_duration(milliseconds(ms))), milliseconds(ms));
  }
}

TEST(CliPath, RelativeArgumentsResolveUnderTheRoot) {
  EXPECT_EQ(resolve_path("x", "/locks"), "/locks/x");
  EXPECT_EQ(resolve_path("x/y", "/locks"), "/locks/x/y");
  EXPECT_EQ(resolve_path("x", "/"), "/x");
  EXPECT_EQ(resolve_path("/other/x", "/locks"), "/other/x");
  EXPECT_EQ(resolve_path("/", "/locks"), "/");
  EXPECT_EQ(resolve_lock_path("invoice-42", "/locks"), "/locks/invoice-42");
}

TEST(CliPath, MalformedPathsAreUsageErrors) {
  for (const char* bad : {"bad//path", "/locks/x/", "a/../b", "a/./b", "..", ".", "x/", "", "/a//b", "/a/..",
                          "a\x01" "b"}) {
    EXPECT_EQ(usage_code_of([&] { resolve_path(bad, "/locks"); }), exit_code::usage) << "'" << bad << "'";
  }
}

TEST(CliPath, MalformedRootIsAUsageError) {
  EXPECT_EQ(usage_code_of([] { resolve_path("x", "locks"); }), exit_code::usage);
  EXPECT_EQ(usage_code_of([] { resolve_path("x", "/locks/"); }), exit_code::usage);
  EXPECT_EQ(usage_code_of([] { resolve_path("x", "/a//b"); }), exit_code::usage);
}

TEST(CliPath, LockPathsExcludeTheRootAndReservedTrees) {
  for (const char* bad : {"/", "/zklock/x", "/zookeeper", "/zookeeper/quota"}) {
    EXPECT_EQ(usage_code_of([&] { resolve_lock_path(bad, "/locks"); }), exit_code::usage) << bad;
  }
  EXPECT_EQ(usage_code_of([] { resolve_lock_path("x", "/zklock"); }), exit_code::usage);
}

TEST(CliPath, MessagesNameWhatTheUserTyped) {
  try {
    resolve_path("bad//path", "/locks");
    FAIL();
  } catch (const CliError& e) {
    EXPECT_NE(std::string(e.what()).find("'bad//path'"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("empty component"), std::string::npos) << e.what();
  }
}

TEST(CliAge, Humanized) {
  EXPECT_EQ(humanize_age(milliseconds(-5)), "0s");
  EXPECT_EQ(humanize_age(milliseconds(0)), "0s");
  EXPECT_EQ(humanize_age(milliseconds(850)), "850ms");
  EXPECT_EQ(humanize_age(milliseconds(42'000)), "42s");
  EXPECT_EQ(humanize_age(milliseconds(184'000)), "3m04s");
  EXPECT_EQ(humanize_age(milliseconds(7'500'000)), "2h05m");
  EXPECT_EQ(humanize_age(milliseconds(4LL * 86'400'000 + 3 * 3'600'000)), "4d03h");
}

TEST(CliTable, AlignsColumnsAndTrimsTrailingSpace) {
  Table t({"LOCK", "N", "OWNER"});
  t.add_row({"/locks/a", "1", "alice"});
  t.add_row({"/locks/longer", "12"});
  EXPECT_EQ(t.render(),
            "LOCK           N   OWNER\n"
            "/locks/a       1   alice\n"
            "/locks/longer  12\n");
}

TEST(CliExitCodes, ErrorsMapToTheDocumentedCodes) {
  EXPECT_EQ(exit_code_for(Errc::invalid_argument), 64);
  EXPECT_EQ(exit_code_for(Errc::no_node), 66);
  EXPECT_EQ(exit_code_for(Errc::connect_timeout), 69);
  EXPECT_EQ(exit_code_for(Errc::connection_loss), 69);
  EXPECT_EQ(exit_code_for(Errc::session_expired), 69);
  EXPECT_EQ(exit_code_for(Errc::deadlock_victim), 73);
  EXPECT_EQ(exit_code_for(Errc::timeout), 75);
  EXPECT_EQ(exit_code_for(Errc::no_auth), 1);
}

// 69 is exactly the outage codes: error.hpp's transient and session-fatal
// classes, plus no quorum and a failed TLS handshake. Every Errc is checked.
TEST(CliExitCodes, UnavailableIsExactlyTheOutageCodes) {
  const std::set<Errc> unavailable = {Errc::connect_timeout,   Errc::connection_loss,     Errc::operation_timeout,
                                      Errc::session_expired,   Errc::closing,             Errc::new_config_no_quorum,
                                      Errc::ssl_connection_error, Errc::runtime_inconsistency};
  for (int i = 0; errc_name(static_cast<Errc>(i)) != "unknown"; ++i) {
    const auto c = static_cast<Errc>(i);
    EXPECT_EQ(exit_code_for(c) == 69, unavailable.count(c) == 1) << errc_name(c);
  }
}

TEST(CliSession, HexLikeZooKeeper) {
  EXPECT_EQ(session_hex(0x1008a2c3e6f0000LL), "0x1008a2c3e6f0000");
  EXPECT_EQ(session_hex(0), "0x0");
}

TEST(CliClientOptions, DurationsAndDigest) {
  GlobalOptions g;
  g.zk = "127.0.0.1:2181";
  g.connect_timeout = "1500ms";
  g.session_timeout = "4s";
  g.digest = "alice:se:cret";
  const auto o = client_options(g);
  EXPECT_EQ(o.connect_timeout, milliseconds(1500));
  EXPECT_EQ(o.session_timeout, milliseconds(4000));
  ASSERT_TRUE(o.credentials);
  EXPECT_EQ(o.credentials->user, "alice");
  EXPECT_EQ(o.credentials->password, "se:cret");

  g.digest = "nocolon";
  EXPECT_EQ(usage_code_of([&] { client_options(g); }), exit_code::usage);
  g.digest.clear();
  g.connect_timeout = "0";
  EXPECT_EQ(usage_code_of([&] { client_options(g); }), exit_code::usage);
  g.connect_timeout = "fast";
  EXPECT_EQ(usage_code_of([&] { client_options(g); }), exit_code::usage);
}

// zklock exec: LOCK must come before "--" (else CMD's first word became the lock).
TEST(CliExecSeparator, LockMustComeBeforeTheSeparator) {
  using Args = std::vector<std::string>;
  // (exec's arguments as typed, how many positionals CLI11 assigned)
  EXPECT_NO_THROW(require_lock_before_separator(Args{"x", "--", "sh", "-c", "y"}, 4));
  EXPECT_NO_THROW(require_lock_before_separator(Args{"x", "--timeout", "5s", "--", "true"}, 2));
  EXPECT_NO_THROW(require_lock_before_separator(Args{"x", "echo", "hi"}, 3));  // no "--": as before
  EXPECT_NO_THROW(require_lock_before_separator(Args{"x", "--", "sh", "--", "y"}, 4));
  EXPECT_NO_THROW(require_lock_before_separator(Args{}, 0));
  EXPECT_EQ(usage_code_of([] { require_lock_before_separator(Args{"--", "sh", "-c", "y"}, 3); }), exit_code::usage);
  EXPECT_EQ(usage_code_of([] { require_lock_before_separator(Args{"--shared", "--", "sh", "x"}, 2); }),
            exit_code::usage);
  EXPECT_EQ(usage_code_of([] { require_lock_before_separator(Args{"--timeout", "1s", "--", "a", "b"}, 2); }),
            exit_code::usage);
}

// The rule relies on how CLI11 fills exec's positionals (LOCK, then CMD...):
// parse real command lines with the same two positionals and check the
// verdict, so a CLI11 upgrade that changes this fails here.
TEST(CliExecSeparator, AgreesWithHowCli11FillsThePositionals) {
  auto verdict = [](std::vector<std::string> argv) {
    CLI::App app{"t"};
    app.fallthrough();
    auto* exec = app.add_subcommand("exec");
    std::string lock, timeout;
    std::vector<std::string> command;
    std::size_t raw = 0;
    exec->add_option("lock", lock)->required();
    exec->add_option("command", command)->required();
    exec->add_option("--timeout", timeout);
    exec->preparse_callback([&](std::size_t n) { raw = n; });
    const auto all = argv;
    std::reverse(argv.begin(), argv.end());  // CLI11's parse(vector) takes the arguments reversed
    app.parse(argv);
    return std::pair{lock, usage_code_of([&] {
                       require_lock_before_separator({all.end() - static_cast<std::ptrdiff_t>(raw), all.end()},
                                                     1 + command.size());
                     })};
  };
  EXPECT_EQ(verdict({"exec", "x", "--", "sh", "-c", "y"}), (std::pair<std::string, int>{"x", 0}));
  EXPECT_EQ(verdict({"exec", "x", "--timeout", "1s", "--", "true"}), (std::pair<std::string, int>{"x", 0}));
  EXPECT_EQ(verdict({"exec", "x", "true"}), (std::pair<std::string, int>{"x", 0}));
  // Without a LOCK before "--", CLI11 makes "sh" the lock: the rule refuses it.
  EXPECT_EQ(verdict({"exec", "--", "sh", "-c", "y"}), (std::pair<std::string, int>{"sh", exit_code::usage}));
  EXPECT_EQ(verdict({"exec", "--timeout", "1s", "--", "sh", "y"}),
            (std::pair<std::string, int>{"sh", exit_code::usage}));
}

}  // namespace
}  // namespace zklock::cli
