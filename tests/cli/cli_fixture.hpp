// The `zklock` binary, run as a child process against a real ZooKeeper (the
// harness's shared standalone server on loopback): the fixture every CLI
// test file shares.
//
// Waits are bounded: a child that does not finish within its deadline is
// killed and the test fails with what it printed. State on the server is
// observed by running `zklock queue --json` until it shows what we wait for.
// No ZKLOCK_* variable of the developer's shell reaches a child: each one
// sees only what its test sets.
#pragma once

#include <chrono>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "zk_harness.hpp"

namespace zklock::cli_test {

using namespace std::chrono_literals;
using nlohmann::json;
using std::chrono::milliseconds;
using test::ChildProcess;
using test::Clock;
using test::eventually;
using test::read_file;
using test::RunResult;

inline const char* const kZklock = ZKLOCK_CLI_BINARY;

using Env = std::vector<std::pair<std::string, std::string>>;

// Wall-clock milliseconds since the epoch, like ZooKeeper's ctime.
inline std::int64_t wall_ms() {
  return std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

inline std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Runs of spaces collapsed to one (table columns, whatever their widths).
inline std::string squeeze(const std::string& line) {
  std::string out;
  for (char c : line) {
    if (c == ' ' && !out.empty() && out.back() == ' ') continue;
    out += c;
  }
  return out;
}

// "<ensemble>:<czxid>" -> czxid.
inline std::int64_t czxid_of(const std::string& token) { return std::stoll(token.substr(token.rfind(':') + 1)); }

// A loopback address nothing listens on.
inline Env unreachable_server() {
  return {{"ZKLOCK_ZK", "127.0.0.1:" + std::to_string(test::free_loopback_port())}};
}

// Creates `path` readable only by the session's own digest identity ("auth"
// scheme: whoever added admin's credentials). `flags`: ZOO_EPHEMERAL etc.
inline int create_private(zhandle_t* zh, const std::string& path, int flags, std::string* created = nullptr) {
  ACL only_me[] = {{ZOO_PERM_ALL, {const_cast<char*>("auth"), const_cast<char*>("")}}};
  ACL_vector acl{1, only_me};
  char buf[512];
  const int rc = zoo_create(zh, path.c_str(), "", 0, &acl, flags, buf, sizeof buf);
  if (rc == ZOK && created != nullptr) *created = buf;
  return rc;
}

// Each test gets its own root under "/" and its own scratch directory.
class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    zk_ = test::shared_server().connect_string();
    root_ = test::unique_path("cli");
  }
  void TearDown() override { children_.clear(); }  // kills anything still running

  // The server, the root and the binary (for nested calls) unless `extra`
  // names them itself.
  Env env(Env extra = {}) const {
    const auto set_unless_given = [&](const std::string& key, const std::string& value) {
      for (const auto& [k, v] : extra) {
        if (k == key) return;
      }
      extra.emplace_back(key, value);
    };
    set_unless_given("ZKLOCK_ZK", zk_);
    set_unless_given("ZKLOCK_ROOT", root_);
    set_unless_given("ZKLOCK_BIN", kZklock);
    return extra;
  }

  test::SpawnOptions spawn_options(std::vector<std::string> argv, Env extra) const {
    test::SpawnOptions so;
    so.argv = std::move(argv);
    so.env = env(std::move(extra));
    so.env_drop_prefixes = {"ZKLOCK_"};
    return so;
  }

  // Runs argv (argv[0] the program) to its end; a run past `timeout` is
  // killed and fails the test.
  RunResult run(const std::vector<std::string>& argv, Env extra = {}, milliseconds timeout = 30s) {
    auto r = test::run_to_exit(spawn_options(argv, std::move(extra)), timeout);
    if (r.timed_out) ADD_FAILURE() << "timed out after " << timeout.count() << " ms: " << argv.back() << "\n"
                                   << r.describe();
    return r;
  }
  RunResult zklock(std::vector<std::string> args, Env extra = {}, milliseconds timeout = 30s) {
    args.insert(args.begin(), kZklock);
    return run(args, std::move(extra), timeout);
  }

  // Starts `zklock exec LOCK [opts] -- sh -c SCRIPT` in the background.
  ChildProcess& exec_background(const std::string& lock, const std::string& script, std::vector<std::string> opts = {},
                                Env extra = {}, bool capture = true) {
    std::vector<std::string> argv{kZklock, "exec", lock};
    argv.insert(argv.end(), opts.begin(), opts.end());
    argv.insert(argv.end(), {"--", "sh", "-c", script});
    auto so = spawn_options(std::move(argv), std::move(extra));
    so.capture_stdout = capture;
    return background(so);
  }
  ChildProcess& background(const test::SpawnOptions& so) {
    children_.push_back(std::make_unique<ChildProcess>(ChildProcess::spawn(so)));
    return *children_.back();
  }

  // A shell loop that blocks until `gate` exists (the test creates it).
  static std::string wait_gate(const std::filesystem::path& gate) {
    return "while [ ! -e '" + gate.string() + "' ]; do sleep 0.01; done";
  }
  static void open_gate(const std::filesystem::path& gate) { std::ofstream(gate) << "go\n"; }

  json queue_json(const std::string& lock) {
    const auto r = zklock({"queue", lock, "--json"});
    if (r.code != 0) return json();
    return json::parse(r.out);
  }
  bool wait_queue_size(const std::string& lock, std::size_t n, milliseconds timeout = 20s) {
    return eventually([&] {
      const auto j = queue_json(lock);
      return !j.is_null() && j["nodes"].size() == n;
    }, timeout);
  }
  // Every background exec ends, with status 0.
  void expect_all_children_exit_0(milliseconds timeout = 30s) {
    for (auto& c : children_) {
      const auto st = c->wait_exit(timeout);
      ASSERT_TRUE(st) << "an exec did not finish";
      EXPECT_TRUE(st->exited() && st->exit_code() == 0) << st->describe();
    }
  }

  std::string zk_, root_;
  const test::TempDir dir_{"zklock-cli-test-"};
  std::vector<std::unique_ptr<ChildProcess>> children_;
};

}  // namespace zklock::cli_test
