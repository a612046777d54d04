// The `zklock` binary, run as a child process against a real ZooKeeper
// (the harness's shared standalone server on loopback). Every subcommand's
// text and JSON output, exec's contract (mutual exclusion, FIFO, tokens,
// environment, signals, exit codes) and bad input.
//
// Waits are bounded: a child that does not finish within its deadline is
// killed and the test fails with what it printed. State on the server is
// observed by running `zklock queue --json` until it shows what we wait for.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "zk_harness.hpp"

extern char** environ;

namespace {

using namespace std::chrono_literals;
using nlohmann::json;
using std::chrono::milliseconds;
using zklock::test::ChildProcess;
using zklock::test::Clock;
using zklock::test::eventually;

const char* const kZklock = ZKLOCK_CLI_BINARY;

struct RunResult {
  int code = -1;  // exit code, or 128+N for signal N
  std::string out, err;
  milliseconds took{0};
  std::string describe() const {
    return "exit " + std::to_string(code) + "\n--- stdout ---\n" + out + "--- stderr ---\n" + err;
  }
};

using Env = std::vector<std::pair<std::string, std::string>>;

// Wall-clock milliseconds since the epoch, like ZooKeeper's ctime.
std::int64_t wall_ms() {
  return std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::vector<std::string> merged_environment(const Env& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string v(*e);
    const auto key = v.substr(0, v.find('='));
    if (std::any_of(extra.begin(), extra.end(), [&](const auto& kv) { return kv.first == key; })) continue;
    if (key.starts_with("ZKLOCK_")) continue;  // nothing leaks in from the developer's shell
    env.push_back(v);
  }
  for (const auto& [k, v] : extra) env.push_back(k + "=" + v);
  return env;
}

// Runs argv to completion with separate stdout/stderr; kills it (and fails)
// if it takes longer than `timeout`.
RunResult run_process(const std::vector<std::string>& argv, const Env& env, milliseconds timeout) {
  int out_pipe[2], err_pipe[2];
  if (::pipe2(out_pipe, O_CLOEXEC) != 0 || ::pipe2(err_pipe, O_CLOEXEC) != 0) throw std::runtime_error("pipe2");
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, out_pipe[1], 1);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  std::vector<char*> args, envp;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const auto env_strings = merged_environment(env);
  for (const auto& e : env_strings) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);
  const auto start = Clock::now();
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, args[0], &fa, nullptr, args.data(), envp.data());
  posix_spawn_file_actions_destroy(&fa);
  ::close(out_pipe[1]);
  ::close(err_pipe[1]);
  if (rc != 0) throw std::runtime_error(std::string("posix_spawn: ") + std::strerror(rc));

  RunResult r;
  const auto deadline = start + timeout;
  bool timed_out = false;
  pollfd fds[2] = {{out_pipe[0], POLLIN, 0}, {err_pipe[0], POLLIN, 0}};
  int open_fds = 2;
  while (open_fds > 0) {
    const auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) {
      timed_out = true;
      break;
    }
    if (::poll(fds, 2, static_cast<int>(left)) <= 0) continue;
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || (fds[i].revents & (POLLIN | POLLHUP)) == 0) continue;
      char buf[4096];
      const auto n = ::read(fds[i].fd, buf, sizeof buf);
      if (n > 0) {
        (i == 0 ? r.out : r.err).append(buf, static_cast<std::size_t>(n));
      } else {
        ::close(fds[i].fd);
        fds[i].fd = -1;
        --open_fds;
      }
    }
  }
  if (timed_out) ::kill(pid, SIGKILL);
  for (auto& f : fds) {
    if (f.fd >= 0) ::close(f.fd);
  }
  int status = 0;
  ::waitpid(pid, &status, 0);
  r.took = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (timed_out) ADD_FAILURE() << "timed out after " << timeout.count() << " ms: " << argv.back() << "\n" << r.describe();
  return r;
}


std::string read_file(const std::filesystem::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Runs of spaces collapsed to one (table columns, whatever their widths).
std::string squeeze(const std::string& line) {
  std::string out;
  for (char c : line) {
    if (c == ' ' && !out.empty() && out.back() == ' ') continue;
    out += c;
  }
  return out;
}

std::int64_t czxid_of(const std::string& token) {
  const auto colon = token.rfind(':');
  return std::stoll(token.substr(colon + 1));
}

// Each test gets its own root under "/" and its own scratch directory.
class CliTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto& server = zklock::test::shared_server();
    zk_ = server.connect_string();
    root_ = zklock::test::unique_path("cli");
    dir_ = std::filesystem::temp_directory_path() / ("zklock-cli-test-" + std::to_string(::getpid()) + "-" +
                                                     std::to_string(counter_++));
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override {
    children_.clear();  // kills anything still running
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  Env env(Env extra = {}) const {
    extra.emplace_back("ZKLOCK_ZK", zk_);
    extra.emplace_back("ZKLOCK_ROOT", root_);
    extra.emplace_back("ZKLOCK_BIN", kZklock);
    return extra;
  }

  RunResult zklock(std::vector<std::string> args, Env extra = {}, milliseconds timeout = 30s) {
    args.insert(args.begin(), kZklock);
    return run_process(args, env(std::move(extra)), timeout);
  }

  // Starts `zklock exec LOCK [opts] -- sh -c SCRIPT` in the background.
  ChildProcess& exec_background(const std::string& lock, const std::string& script, std::vector<std::string> opts = {},
                                Env extra = {}, bool capture = true) {
    std::vector<std::string> argv{kZklock, "exec", lock};
    argv.insert(argv.end(), opts.begin(), opts.end());
    argv.insert(argv.end(), {"--", "sh", "-c", script});
    zklock::test::SpawnOptions so;
    so.argv = argv;
    so.env = env(std::move(extra));
    so.capture_stdout = capture;
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

  std::string zk_, root_;
  std::filesystem::path dir_;
  std::vector<std::unique_ptr<ChildProcess>> children_;
  static inline int counter_ = 0;
};

// --- bad input -----------------------------------------------------------------

TEST_F(CliTest, UsageErrorsExit64QuicklyWithAHint) {
  // A closed port: usage errors must be reported before any connection attempt.
  const Env unreachable{{"ZKLOCK_ZK", "127.0.0.1:" + std::to_string(zklock::test::free_loopback_port())}};
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
    const auto r = run_process(a, env(unreachable), 10s);
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
  const Env unreachable{{"ZKLOCK_ZK", "127.0.0.1:" + std::to_string(zklock::test::free_loopback_port())}};
  const std::vector<std::vector<std::string>> cases = {
      {"ls"}, {"queue", "x"}, {"cycles"}, {"graph"}, {"revocations"}, {"exec", "x", "--", "true"},
      {"revoke", "x/w_0123456789abcdef_0123456789abcdef0123456789abcdef_0000000001", "--reason", "r"}, {"doctor"}};
  for (auto args : cases) {
    args.insert(args.begin(), {kZklock, "--connect-timeout", "1s"});
    const auto r = run_process(args, env(unreachable), 10s);
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

// --- inspection ------------------------------------------------------------------

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
  auto handle = zklock::test::ZkHandle::connect(zk_);
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
  for (auto& c : children_) {
    const auto st = c->wait_exit(30s);
    ASSERT_TRUE(st) << "an exec did not finish";
    EXPECT_TRUE(st->exited() && st->exit_code() == 0) << st->describe();
  }
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

  auto handle = zklock::test::ZkHandle::connect(zk_);
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
  for (auto& c : children_) {
    const auto ex = c->wait_exit(30s);
    ASSERT_TRUE(ex) << "an exec did not finish";
    EXPECT_TRUE(ex->exited() && ex->exit_code() == 0) << ex->describe();
  }
}

// --- exec ----------------------------------------------------------------------

TEST_F(CliTest, ExecIsMutuallyExclusiveAndFifoWithIncreasingTokens) {
  const auto gate = dir_ / "gate";
  const auto log = dir_ / "log";
  auto& holder = exec_background("fifo", "echo \"holder $ZKLOCK_TOKEN\" >> '" + log.string() + "'; echo held; " +
                                             wait_gate(gate));
  ASSERT_TRUE(holder.read_until("held", 20s));
  constexpr int kWaiters = 10;
  for (int i = 0; i < kWaiters; ++i) {
    // The critical section logs its start and end with a pause between: an
    // overlapping one would interleave lines.
    exec_background("fifo",
                    "echo \"start " + std::to_string(i) + " $ZKLOCK_TOKEN\" >> '" + log.string() +
                        "'; sleep 0.02; echo \"end " + std::to_string(i) + "\" >> '" + log.string() + "'",
                    {}, {}, false);
    ASSERT_TRUE(wait_queue_size("fifo", static_cast<std::size_t>(i + 2))) << "waiter " << i << " never queued";
  }
  const auto started = Clock::now();
  open_gate(gate);
  for (auto& c : children_) {
    const auto st = c->wait_exit(60s);
    ASSERT_TRUE(st) << "an exec did not finish";
    EXPECT_TRUE(st->exited() && st->exit_code() == 0) << st->describe();
  }
  const auto drained = std::chrono::duration_cast<milliseconds>(Clock::now() - started);
  std::cout << "[ figures  ] 10 queued zklock exec invocations drained in " << drained.count() << " ms\n";

  const auto lines = lines_of(read_file(log));
  ASSERT_EQ(lines.size(), 1u + 2 * kWaiters) << read_file(log);
  std::int64_t last = czxid_of(lines[0]);
  for (int i = 0; i < kWaiters; ++i) {
    const auto& start = lines[static_cast<std::size_t>(1 + 2 * i)];
    const auto& end = lines[static_cast<std::size_t>(2 + 2 * i)];
    EXPECT_TRUE(start.starts_with("start " + std::to_string(i) + " ")) << "grant " << i << ": " << start;
    EXPECT_EQ(end, "end " + std::to_string(i)) << "critical sections overlapped";
    const auto czxid = czxid_of(start);
    EXPECT_GT(czxid, last) << "tokens must increase in grant order";
    last = czxid;
  }
}

TEST_F(CliTest, ExecExportsTokenLockAndOwner) {
  const auto out = dir_ / "env";
  const std::string script = "printf '%s\\n%s\\n%s\\n' \"$ZKLOCK_TOKEN\" \"$ZKLOCK_LOCK\" \"$ZKLOCK_OWNER\" > '" +
                             out.string() + "'";
  auto r = zklock({"exec", "envlock", "--", "sh", "-c", script}, {{"ZKLOCK_OWNER", "batch-7"}});
  ASSERT_EQ(r.code, 0) << r.describe();
  auto lines = lines_of(read_file(out));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find(':'), std::string::npos);
  EXPECT_GT(czxid_of(lines[0]), 0);
  EXPECT_EQ(lines[1], root_ + "/envlock");
  EXPECT_EQ(lines[2], "batch-7");

  // Without ZKLOCK_OWNER: the default owner, exported all the same.
  r = zklock({"exec", "envlock", "--", "sh", "-c", script});
  ASSERT_EQ(r.code, 0) << r.describe();
  lines = lines_of(read_file(out));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_FALSE(lines[2].empty());
  EXPECT_NE(lines[2], "batch-7");
}

TEST_F(CliTest, ExecPassesCmdStatusThrough) {
  auto r = zklock({"exec", "status", "--", "sh", "-c", "exit 3"});
  EXPECT_EQ(r.code, 3) << r.describe();
  EXPECT_TRUE(r.err.empty()) << r.describe();
  r = zklock({"exec", "status", "--", "sh", "-c", "kill -9 $$"});
  EXPECT_EQ(r.code, 128 + SIGKILL) << r.describe();
  r = zklock({"exec", "status", "--", "true"});
  EXPECT_EQ(r.code, 0) << r.describe();
  r = zklock({"exec", "status", "--", "/nonexistent/command"});
  EXPECT_EQ(r.code, 127) << r.describe();
  // The lock was released each time: nothing is left in the queue.
  const auto q = queue_json("status");
  ASSERT_FALSE(q.is_null());
  EXPECT_TRUE(q["nodes"].empty()) << q.dump();
}

TEST_F(CliTest, ExecForwardsSignalsToCmd) {
  const std::string script = "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.02; done";
  auto& child = exec_background("signals", script);
  ASSERT_TRUE(child.read_until("ready", 20s));
  ::kill(child.pid(), SIGTERM);  // zklock only, not its process group
  ASSERT_TRUE(child.read_until("got-term", 10s)) << "CMD never saw the forwarded SIGTERM";
  const auto st = child.wait_exit(10s);
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->exited() && st->exit_code() == 7) << st->describe();
}

TEST_F(CliTest, ExecSignalWhileWaitingCancelsTheWait) {
  const auto gate = dir_ / "gate";
  auto& holder = exec_background("cancel", "echo held; " + wait_gate(gate));
  ASSERT_TRUE(holder.read_until("held", 20s));
  auto& waiter = exec_background("cancel", "echo ran");
  ASSERT_TRUE(wait_queue_size("cancel", 2));
  const auto start = Clock::now();
  ::kill(waiter.pid(), SIGINT);
  const auto st = waiter.wait_exit(10s);
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->exited() && st->exit_code() == 128 + SIGINT) << st->describe();
  EXPECT_LT(Clock::now() - start, 2s) << "the cancelled wait must end promptly";
  EXPECT_FALSE(waiter.read_line(100ms)) << "CMD must not run";
  EXPECT_TRUE(wait_queue_size("cancel", 1)) << "the cancelled wait must leave no node";
  open_gate(gate);
  ASSERT_TRUE(holder.wait_exit(20s));
}

TEST_F(CliTest, ExecTimeoutExits75) {
  const auto gate = dir_ / "gate";
  auto& holder = exec_background("busy", "echo held; " + wait_gate(gate));
  ASSERT_TRUE(holder.read_until("held", 20s));
  const auto r = zklock({"exec", "busy", "--timeout", "500ms", "--", "sh", "-c", "echo ran"});
  EXPECT_EQ(r.code, 75) << r.describe();
  EXPECT_GE(r.took, 500ms);
  EXPECT_LT(r.took, 3000ms);
  EXPECT_TRUE(r.out.empty()) << "CMD must not run";
  EXPECT_NE(r.err.find("timed out after 500ms waiting for " + root_ + "/busy"), std::string::npos) << r.describe();
  EXPECT_TRUE(wait_queue_size("busy", 1)) << "the timed-out wait must leave no node";
  open_gate(gate);
  ASSERT_TRUE(holder.wait_exit(20s));
}

TEST_F(CliTest, ExecSharedHoldersRunTogetherAndExcludeAWriter) {
  const auto gate = dir_ / "shared-gate";
  // Two readers hold at once: both print before either is let go.
  auto& r1 = exec_background("rw", "echo reading; " + wait_gate(gate), {"--shared", "--owner", "reader-1"});
  auto& r2 = exec_background("rw", "echo reading; " + wait_gate(gate), {"--shared", "--owner", "reader-2"});
  ASSERT_TRUE(r1.read_until("reading", 20s));
  ASSERT_TRUE(r2.read_until("reading", 20s));
  // A writer cannot get in while they hold.
  const auto w = zklock({"exec", "rw", "--timeout", "300ms", "--", "sh", "-c", "echo wrote"});
  EXPECT_EQ(w.code, 75) << w.describe();
  const auto q = queue_json("rw");
  ASSERT_EQ(q["nodes"].size(), 2u);
  for (const auto& n : q["nodes"]) EXPECT_EQ(n["mode"], "shared");
  open_gate(gate);
  ASSERT_TRUE(r1.wait_exit(20s));
  ASSERT_TRUE(r2.wait_exit(20s));
  const auto w2 = zklock({"exec", "rw", "--timeout", "5s", "--", "sh", "-c", "echo wrote"});
  EXPECT_EQ(w2.code, 0) << w2.describe();
  EXPECT_NE(w2.out.find("wrote"), std::string::npos);
}

TEST_F(CliTest, ExecLostLockTerminatesCmdAndExits74) {
  const auto pidfile = dir_ / "pid";
  auto& child = exec_background("lost", "echo $$ > '" + pidfile.string() + "'; echo running; exec sleep 300");
  ASSERT_TRUE(child.read_until("running", 20s));
  const auto q = queue_json("lost");
  ASSERT_EQ(q["nodes"].size(), 1u);
  const auto node = q["nodes"][0]["path"].get<std::string>();
  const auto r = zklock({"revoke", node, "--reason", "lost-lock test"});
  ASSERT_EQ(r.code, 0) << r.describe();
  const auto st = child.wait_exit(20s);
  ASSERT_TRUE(st) << "zklock exec did not end after its node was revoked";
  EXPECT_TRUE(st->exited() && st->exit_code() == 74) << st->describe();
  const pid_t cmd_pid = std::stoi(read_file(pidfile));
  EXPECT_EQ(::kill(cmd_pid, 0), -1) << "CMD still running";
}

TEST_F(CliTest, ExecKillsACmdThatIgnoresSigtermAfterTheGrace) {
  auto& child = exec_background("stubborn", "trap '' TERM; echo running; while :; do sleep 0.02; done",
                                {"--grace", "300ms"});
  ASSERT_TRUE(child.read_until("running", 20s));
  const auto q = queue_json("stubborn");
  ASSERT_EQ(q["nodes"].size(), 1u);
  const auto start = Clock::now();
  ASSERT_EQ(zklock({"revoke", q["nodes"][0]["path"], "--reason", "grace test"}).code, 0);
  const auto st = child.wait_exit(20s);
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->exited() && st->exit_code() == 74) << st->describe();
  EXPECT_GE(Clock::now() - start, 300ms);
}

// --- cycles, graph, revoke, revocations -----------------------------------------------

// Two process trees take X then Y, and Y then X, as nested zklock exec calls
// with one owner each: a real deadlock.
TEST_F(CliTest, CrossOrderNestedExecsFormACycleThatRevokeBreaks) {
  const auto gate = dir_ / "gate";
  auto nested = [&](const std::string& first, const std::string& second) {
    return "echo held-" + first + "; " + wait_gate(gate) + "; \"$ZKLOCK_BIN\" exec " + second +
           " -- sh -c 'echo inner-ran'";
  };
  auto& alice = exec_background("X", nested("X", "Y"), {}, {{"ZKLOCK_OWNER", "alice"}});
  auto& bob = exec_background("Y", nested("Y", "X"), {}, {{"ZKLOCK_OWNER", "bob"}});
  ASSERT_TRUE(alice.read_until("held-X", 20s));
  ASSERT_TRUE(bob.read_until("held-Y", 20s));
  open_gate(gate);
  ASSERT_TRUE(wait_queue_size("X", 2) && wait_queue_size("Y", 2));

  // cycles
  json cycles;
  ASSERT_TRUE(eventually([&] {
    const auto r = zklock({"cycles", "--json"});
    if (r.code != 0) return false;
    cycles = json::parse(r.out);
    return cycles["cycles"].size() == 1;
  }, 20s));
  const auto& cycle = cycles["cycles"][0];
  EXPECT_EQ(cycle["owners"], json::array({"alice", "bob"}));
  EXPECT_EQ(cycle["text"], "alice -[" + root_ + "/Y]-> bob -[" + root_ + "/X]-> alice");
  ASSERT_EQ(cycle["waits"].size(), 2u);
  EXPECT_EQ(cycle["waits"][0]["kind"], "hard");
  auto r = zklock({"cycles"});
  ASSERT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("cycle 1: alice -[" + root_ + "/Y]-> bob -[" + root_ + "/X]-> alice"), std::string::npos)
      << r.out;

  // graph in three formats
  r = zklock({"graph", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  auto g = json::parse(r.out);
  EXPECT_EQ(g["owners"], json::array({"alice", "bob"}));
  EXPECT_EQ(g["waits"].size(), 2u);
  EXPECT_EQ(g["cycles"].size(), 1u);
  ASSERT_EQ(g["locks"].size(), 2u);
  EXPECT_EQ(g["locks"][0]["path"], root_ + "/X");
  EXPECT_EQ(g["locks"][0]["holders"][0]["owner"], "alice");
  EXPECT_EQ(g["locks"][0]["waiters"][0]["owner"], "bob");
  r = zklock({"graph", "--format", "dot"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_TRUE(r.out.starts_with("digraph zklock {"));
  EXPECT_NE(r.out.find("\"lock:" + root_ + "/X\" -> \"owner:alice\" [label=\"holds\", style=bold, color=red"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"owner:bob\" -> \"lock:" + root_ + "/X\" [label=\"waits\", style=dashed, color=red"),
            std::string::npos) << r.out;
  r = zklock({"graph"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_NE(r.out.find("2 locks, 2 held, 2 waiting"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bob waits for alice on " + root_ + "/X (hard)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 cycle"), std::string::npos) << r.out;

  // revoke bob's waiting node on X: bob's inner exec is a deadlock victim (73),
  // so is bob's outer one (CMD's status); alice gets Y and finishes.
  const auto victim = cycle["waits"][1]["waiter_node"].get<std::string>();
  ASSERT_TRUE(victim.starts_with(root_ + "/X/")) << victim;
  r = zklock({"revoke", victim, "--reason", "operator breaks the cycle", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  const auto rj = json::parse(r.out);
  EXPECT_EQ(rj["outcome"], "revoked");
  EXPECT_EQ(rj["owner"], "bob");
  ASSERT_EQ(rj["records"].size(), 1u);

  const auto bob_st = bob.wait_exit(20s);
  ASSERT_TRUE(bob_st) << "the victim's tree did not end";
  EXPECT_TRUE(bob_st->exited() && bob_st->exit_code() == 73) << bob_st->describe();
  ASSERT_TRUE(alice.read_until("inner-ran", 20s));
  const auto alice_st = alice.wait_exit(20s);
  ASSERT_TRUE(alice_st);
  EXPECT_TRUE(alice_st->exited() && alice_st->exit_code() == 0) << alice_st->describe();

  // The record, listed.
  r = zklock({"revocations", "--json", "--limit", "100"});
  ASSERT_EQ(r.code, 0) << r.describe();
  const auto list = json::parse(r.out);
  const auto it = std::find_if(list["revocations"].begin(), list["revocations"].end(),
                               [&](const json& e) { return e["victim_node"] == victim; });
  ASSERT_NE(it, list["revocations"].end()) << r.out;
  EXPECT_EQ((*it)["victim_owner"], "bob");
  EXPECT_EQ((*it)["policy"], "operator");
  EXPECT_EQ((*it)["reason"], "operator breaks the cycle");
  EXPECT_TRUE((*it)["by"].get<std::string>().starts_with("zklock-cli:"));
  EXPECT_EQ((*it)["record"], rj["records"][0]);
  r = zklock({"revocations", "--limit", "100"});
  ASSERT_EQ(r.code, 0);
  EXPECT_NE(r.out.find(victim), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("operator breaks the cycle"), std::string::npos) << r.out;

  r = zklock({"cycles"});
  EXPECT_NE(r.out.find("no cycles"), std::string::npos) << r.out;
}

#ifdef ZKLOCK_DETECTOR_BINARY
// The same cross-order pair with zklock-detector running: it breaks the
// cycle by itself, one tree exits 73 with the cycle in its message, the
// other completes.
TEST_F(CliTest, DetectorMakesOneNestedExecADeadlockVictim) {
  zklock::test::SpawnOptions so;
  so.argv = {ZKLOCK_DETECTOR_BINARY, "--zk", zk_, "--root", root_, "--min-wait", "300ms", "--interval", "200ms",
             "--metrics-port", "0", "--session-timeout", "4s", "--id", "cli-test-detector"};
  so.capture_stdout = false;
  children_.push_back(std::make_unique<ChildProcess>(ChildProcess::spawn(so)));
  auto& detector = *children_.back();

  const auto gate = dir_ / "gate";
  auto nested = [&](const std::string& first, const std::string& second, const std::string& who) {
    return "echo held-" + first + "; " + wait_gate(gate) + "; \"$ZKLOCK_BIN\" exec " + second +
           " -- sh -c 'echo inner-ran' 2> '" + (dir_ / (who + ".err")).string() + "'";
  };
  auto& alice = exec_background("X", nested("X", "Y", "alice"), {}, {{"ZKLOCK_OWNER", "alice"}});
  auto& bob = exec_background("Y", nested("Y", "X", "bob"), {}, {{"ZKLOCK_OWNER", "bob"}});
  ASSERT_TRUE(alice.read_until("held-X", 20s));
  ASSERT_TRUE(bob.read_until("held-Y", 20s));
  const auto started = Clock::now();
  open_gate(gate);

  const auto a = alice.wait_exit(30s);
  const auto b = bob.wait_exit(30s);
  ASSERT_TRUE(a && b) << "the deadlock was not broken";
  std::cout << "[ figures  ] cycle broken and both trees done in "
            << std::chrono::duration_cast<milliseconds>(Clock::now() - started).count() << " ms\n";
  ASSERT_TRUE(a->exited() && b->exited()) << a->describe() << " / " << b->describe();
  const bool alice_victim = a->exit_code() == 73;
  EXPECT_NE(a->exit_code() == 73, b->exit_code() == 73) << "exactly one victim: " << a->describe() << " / "
                                                       << b->describe();
  EXPECT_EQ((alice_victim ? b : a)->exit_code(), 0);
  const auto err = read_file(dir_ / (alice_victim ? "alice.err" : "bob.err"));
  EXPECT_EQ(lines_of(err).size(), 1u) << err;
  EXPECT_NE(err.find("deadlock victim"), std::string::npos) << err;
  EXPECT_NE(err.find("alice -[" + root_ + "/Y]-> bob -[" + root_ + "/X]-> alice"), std::string::npos) << err;

  const auto r = zklock({"revocations", "--json", "--limit", "1000"});
  ASSERT_EQ(r.code, 0) << r.describe();
  bool found = false;
  const auto list = json::parse(r.out);
  for (const auto& e : list["revocations"]) {
    if (e["by"] == "cli-test-detector" && e["victim_node"].get<std::string>().starts_with(root_ + "/")) {
      found = true;
      EXPECT_EQ(e["victim_owner"], alice_victim ? "alice" : "bob");
      EXPECT_EQ(e["cycle"].size(), 2u);
    }
  }
  EXPECT_TRUE(found) << r.out;
  detector.terminate(5s);
}
#endif

TEST_F(CliTest, RevokeRefusesNodesThatAreNotLockNodes) {
  auto handle = zklock::test::ZkHandle::connect(zk_);
  handle.ensure(root_);
  ASSERT_EQ(handle.create(root_ + "/plain", "", 0), ZOK);
  const auto r = zklock({"revoke", "plain", "--reason", "x"});
  EXPECT_EQ(r.code, 64) << r.describe();
  EXPECT_EQ(handle.exists(root_ + "/plain"), ZOK);
}

// --- a messy tree: parts these credentials may not read -----------------------------

// Creates `path` readable only by the session's own digest identity ("auth"
// scheme: whoever added admin's credentials). `flags`: ZOO_EPHEMERAL etc.
int create_private(zhandle_t* zh, const std::string& path, int flags, std::string* created = nullptr) {
  ACL only_me[] = {{ZOO_PERM_ALL, {const_cast<char*>("auth"), const_cast<char*>("")}}};
  ACL_vector acl{1, only_me};
  char buf[512];
  const int rc = zoo_create(zh, path.c_str(), "", 0, &acl, flags, buf, sizeof buf);
  if (rc == ZOK && created != nullptr) *created = buf;
  return rc;
}

TEST_F(CliTest, UnreadableDirectoriesAndNodesAreReportedAndTheRestIsShown) {
  auto handle = zklock::test::ZkHandle::connect(zk_);
  for (const char* p : {"", "/jobs", "/jobs/a"}) handle.ensure(root_ + p);  // jobs/a: an idle lock anyone may read
  // The admin's session: a directory, and a lock node in an open lock, that
  // only the admin may read.
  auto admin = zklock::test::ZkHandle::connect(zk_);
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

// --- exec's LOCK comes before "--" ---------------------------------------------------

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

// --- doctor ---------------------------------------------------------------------

TEST_F(CliTest, DoctorReportsOnTheServer) {
  auto handle = zklock::test::ZkHandle::connect(zk_);
  handle.ensure(root_);
  auto r = zklock({"doctor", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  const auto j = json::parse(r.out);
  EXPECT_EQ(j["ok"], true);
  std::map<std::string, json> by_name;
  for (const auto& c : j["checks"]) by_name[c["name"]] = c;
  const auto server = "server " + zk_;
  ASSERT_TRUE(by_name.count(server)) << r.out;
  EXPECT_EQ(by_name[server]["status"], "ok");
  EXPECT_NE(by_name[server]["detail"].get<std::string>().find("mode standalone"), std::string::npos);
  EXPECT_EQ(by_name["session"]["status"], "ok");
  EXPECT_NE(by_name["session timeout"]["detail"].get<std::string>().find("negotiated"), std::string::npos);
  EXPECT_EQ(by_name["root"]["status"], "ok");
  EXPECT_EQ(by_name["acl"]["status"], "ok") << by_name["acl"].dump();
  EXPECT_TRUE(by_name.count("ensemble id"));
  EXPECT_TRUE(by_name.count("detector"));
  r = zklock({"doctor"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_TRUE(r.out.starts_with("CHECK")) << r.out;
  EXPECT_NE(r.out.find("mode standalone"), std::string::npos) << r.out;
  // The probe node is gone again.
  std::vector<std::string> children;
  ASSERT_EQ(handle.children(root_, &children), ZOK);
  EXPECT_TRUE(children.empty());
}

// A head that keeps others waiting is reported ("head not taking
// the lock"), counted from the first waiter's arrival and, once the lock
// was handed off, from the hand-off; a head with no waiter never is. The
// tree cannot tell a long hold from a stuck head: these heads hold.
TEST_F(CliTest, DoctorReportsAHeadThatKeepsOthersWaitingPastTheThreshold) {
  const auto lock = root_ + "/jobs/a";
  // The doctor's JSON check for `lock` ("lock <path>"), or null.
  const auto head_check = [&](const RunResult& r) {
    if (r.code != 0) return json();
    const auto j = json::parse(r.out);
    for (const auto& c : j["checks"]) {
      if (c["name"] == "lock " + lock) return c;
    }
    return json();
  };
  const auto doctor = [&] { return zklock({"doctor", "--json", "--head-threshold", "1s"}); };
  const auto gate_a = dir_ / "gate-a", gate_b = dir_ / "gate-b";
  auto& alice = exec_background("jobs/a", "echo held; " + wait_gate(gate_a), {"--owner", "alice"});
  ASSERT_TRUE(alice.read_until("held", 20s)) << "alice never held";

  // Alone at the head, older than the threshold: no finding.
  ASSERT_TRUE(eventually([&] {
    const auto q = queue_json("jobs/a");
    return !q.is_null() && q["nodes"].size() == 1 && q["nodes"][0]["age_ms"].get<std::int64_t>() >= 1500;
  }, 20s));
  auto r = doctor();
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_TRUE(head_check(r).is_null()) << r.out;
  EXPECT_NE(r.out.find("no lock head has kept others waiting for 1s or longer (0 with waiters)"), std::string::npos)
      << r.out;

  // Two waiters behind her: reported once the first has waited 1 s.
  const auto waiters_from = wall_ms();
  auto& bob = exec_background("jobs/a", "echo bob held; " + wait_gate(gate_b), {"--owner", "bob"});
  ASSERT_TRUE(wait_queue_size("jobs/a", 2));
  exec_background("jobs/a", "true", {"--owner", "carol"}, {}, false);
  ASSERT_TRUE(wait_queue_size("jobs/a", 3));
  const auto q = queue_json("jobs/a");
  json found;
  ASSERT_TRUE(eventually([&] { return !(found = head_check(r = doctor())).is_null(); }, 20s)) << r.describe();
  const auto upper = wall_ms() - waiters_from + 2;
  EXPECT_EQ(found["status"], "warn");
  EXPECT_EQ(found["finding"], "head not taking the lock");
  EXPECT_EQ(found["lock"], lock);
  EXPECT_EQ(found["node"], q["nodes"][0]["path"]);
  EXPECT_EQ(found["owner"], "alice");
  EXPECT_EQ(found["session"], q["nodes"][0]["session"]);
  EXPECT_EQ(found["waiters"], 2);
  EXPECT_EQ(found["since_hand_off"], false);
  // From bob's arrival, not from alice's creation (1.5 s earlier at least).
  EXPECT_GE(found["head_ms"].get<std::int64_t>(), 1000);
  EXPECT_LE(found["head_ms"].get<std::int64_t>(), upper);
  const auto detail = found["detail"].get<std::string>();
  EXPECT_TRUE(detail.starts_with("head not taking the lock: " + q["nodes"][0]["node"].get<std::string>() +
                                 " of alice (session " + q["nodes"][0]["session"].get<std::string>() +
                                 ") has had 2 waiting behind it for "))
      << detail;
  EXPECT_TRUE(detail.ends_with(": held or stuck, check the owner")) << detail;
  EXPECT_EQ(json::parse(r.out)["ok"], true) << "a warning, not a failure";
  r = zklock({"doctor", "--head-threshold", "1s"});
  ASSERT_EQ(r.code, 0) << r.describe();
  bool text_found = false;
  for (const auto& l : lines_of(r.out)) {
    if (squeeze(l).starts_with("lock " + lock + " warn head not taking the lock: ")) text_found = true;
  }
  EXPECT_TRUE(text_found) << r.out;
  // A threshold it has not reached yet: no finding.
  r = zklock({"doctor", "--json", "--head-threshold", "1h"});
  EXPECT_TRUE(head_check(r).is_null()) << r.out;

  // Alice hands off to bob, who queued long ago: counted from the hand-off.
  const auto released = wall_ms();
  open_gate(gate_a);
  ASSERT_TRUE(bob.read_until("bob held", 20s)) << "bob never held";
  ASSERT_TRUE(eventually([&] {
    found = head_check(r = doctor());
    return !found.is_null() && found["owner"] == "bob";
  }, 20s)) << r.describe();
  EXPECT_EQ(found["since_hand_off"], true) << found.dump();
  EXPECT_EQ(found["waiters"], 1);
  EXPECT_GE(found["head_ms"].get<std::int64_t>(), 1000);
  EXPECT_LE(found["head_ms"].get<std::int64_t>(), wall_ms() - released + 2) << found.dump();
  EXPECT_NE(found["detail"].get<std::string>().find(" (since the last hand-off)"), std::string::npos);

  open_gate(gate_b);
  for (auto& c : children_) {
    const auto st = c->wait_exit(30s);
    ASSERT_TRUE(st) << "an exec did not finish";
    EXPECT_TRUE(st->exited() && st->exit_code() == 0) << st->describe();
  }
}

TEST_F(CliTest, DoctorRejectsABadHeadThresholdBeforeConnecting) {
  const Env unreachable{{"ZKLOCK_ZK", "127.0.0.1:" + std::to_string(zklock::test::free_loopback_port())}};
  const auto r = zklock({"doctor", "--head-threshold", "soon"}, unreachable);
  EXPECT_EQ(r.code, 64) << r.describe();
  EXPECT_LT(r.took, 3s) << r.describe();
}

}  // namespace
