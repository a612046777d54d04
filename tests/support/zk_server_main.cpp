// zklock-zk-server: starts, stops and reports throwaway ZooKeeper servers that
// outlive it, on the test harness's ZkServer (scripts/zk-server runs it).
//
// Its interface is scripts/zk-server's (usage below): the demo, the benchmark,
// CI and people start servers through it; the tests use the same ZkServer in
// process.  Exit status: 0 success, 1 failure, 2 bad usage.
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <iostream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zk_server.hpp"

namespace {

namespace fs = std::filesystem;
using zklock::test::HarnessError;
using zklock::test::ZkEnsemble;
using zklock::test::ZkServer;
using zklock::test::ZkServerOptions;
using std::chrono::milliseconds;
using std::chrono::seconds;

constexpr std::string_view kUsage = R"usage(Usage:
  zk-server start [--port P] [--dir D] [--tick MS] [--min-session-timeout MS]
                  [--max-session-timeout MS] [--timeout S] [--env]
  zk-server stop D [--clean] [--timeout S]
  zk-server status D
  zk-server ensemble start [--dir D] [--tick MS] [--timeout S] [--env]
  zk-server ensemble stop D [--clean] [--timeout S]

start    Starts a standalone server on 127.0.0.1 and waits (up to --timeout
         seconds, default 30) until it answers `ruok` with `imok` and `conf`
         shows its own data dir.  Without --port a free port is picked (and
         re-picked if another process takes it first).  Without --dir a fresh
         temp dir is made.  If D already holds a zoo.cfg (a stopped server or
         ensemble member), that server is started again with its port and
         data: nodes and unexpired sessions survive.  Default tick: 200 ms.
stop     Stops the server whose dir is D by its pid (D/zk.pid): SIGTERM, then
         SIGKILL after --timeout seconds (default 10).  Removes nothing unless
         --clean.  Stopping a stopped server is not an error.
status   Prints the connect string and exits 0 if D's server answers `imok`;
         exits 1 otherwise.
ensemble start   Three servers on loopback, each with its own client, quorum
         and election port and member dir D/1, D/2, D/3 (data/myid inside);
         waits until all three serve (Mode leader/follower).  A single member
         is stopped and started with `stop D/2` and `start --dir D/2`.
ensemble stop    Stops all members of D.

Output:
  stdout  the connect string, e.g. 127.0.0.1:21345 (ensemble: three, comma-
          separated).  With --env instead two shell-assignable lines:
              ZK_CONNECT=127.0.0.1:21345
              ZK_DIR=/tmp/zklock-zk-abc123
          so `eval "$(scripts/zk-server start --env)"` sets both.
  stderr  progress, the dir, and on failure the tail of the server log.
Exit status: 0 on success, 1 on failure, 2 on bad usage.

Dir layout: zoo.cfg, data/ (ZooKeeper dataDir: snapshots, txn logs, myid),
zk.log (server log), zk.out (JVM stdout/stderr), zk.pid.  Ensemble dirs also
hold `connect` (the connect string).

The servers are the test harness's (tests/support/zk_server.hpp): the same
zoo.cfg, JVM options and readiness checks as the tests' own servers.
scripts/zk-server runs the zklock-zk-server program, building it first if
needed, from ZKLOCK_BUILD_DIR (default: build/ in the repository).

Environment: JAVA (default: the java found at build time), ZK_JAR (default
/usr/share/java/zookeeper.jar), ZK_HEAP_MB (default 256), ZK_JVM_DEFAULTS=1
(the JVM's default JIT and collector, as zkServer.sh runs ZooKeeper, instead
of the tests' quick-start settings: for benchmarks).
)usage";

// Bad usage: exit 2 with a pointer to --help.
struct UsageError {
  std::string message;
};
// -h or --help among a command's options: the usage on stdout, exit 0.
struct HelpWanted {};

bool is_help(std::string_view word) { return word == "-h" || word == "--help"; }

void log(const std::string& message) { std::cerr << "zk-server: " << message << std::endl; }

// The command line after the command word(s), read front to back.
class Args {
 public:
  Args(std::string context, std::vector<std::string> words) : context_(std::move(context)), words_(std::move(words)) {}
  bool done() const { return next_ >= words_.size(); }
  const std::string& take() { return words_[next_++]; }
  const std::string& value(const std::string& flag) {
    if (done()) throw UsageError{context_ + ": " + flag + " needs a value"};
    return take();
  }
  // A whole non-negative number for `flag`, else bad usage "`flag` must be `what`".
  int number(const std::string& flag, std::string_view what) {
    const std::string& text = value(flag);
    int v = 0;
    std::size_t used = 0;
    try {
      v = std::stoi(text, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || used != text.size() || v < 0) throw UsageError{flag + " must be " + std::string(what)};
    return v;
  }
  const std::string& context() const { return context_; }

 private:
  std::string context_;
  std::vector<std::string> words_;
  std::size_t next_ = 0;
};

// How every server is run: detached, with the JVM settings from the environment.
ZkServerOptions run_options() {
  ZkServerOptions o;
  o.detached = true;
  if (const char* v = std::getenv("JAVA"); v != nullptr && *v != '\0') o.java = v;
  if (const char* v = std::getenv("ZK_JAR"); v != nullptr && *v != '\0') o.zk_jar = v;
  if (const char* v = std::getenv("ZK_HEAP_MB"); v != nullptr && *v != '\0') {
    try {
      o.java_heap_mb = std::stoi(v);
    } catch (const std::exception&) {
      throw HarnessError(std::string("ZK_HEAP_MB must be megabytes, not '") + v + "'");
    }
  }
  if (const char* v = std::getenv("ZK_JVM_DEFAULTS"); v != nullptr && *v != '\0') {
    const std::string s = v;
    if (s != "0" && s != "1") throw HarnessError("ZK_JVM_DEFAULTS must be 0 or 1, not '" + s + "'");
    o.jvm_defaults = s == "1";
  }
  return o;
}

// D made absolute and physical (symlinks resolved), created if missing: the
// form every later `stop D` and `status D` finds the server by.
fs::path physical_dir(const fs::path& dir) {
  fs::create_directories(dir);
  return fs::canonical(dir);
}

void print_result(bool env, const std::string& connect, const fs::path& dir) {
  if (env) {
    std::cout << "ZK_CONNECT=" << connect << "\nZK_DIR=" << dir.string() << "\n";
  } else {
    std::cout << connect << "\n";
  }
}

// Stops the server in `dir` if one runs there; a stopped one is not an error.
void stop_dir(const fs::path& dir, milliseconds grace) {
  auto server = ZkServer::open(dir, run_options());
  if (!server->running()) {
    log("no running server in " + dir.string());
    return;
  }
  const pid_t pid = server->pid();
  server->stop(grace);
  log("stopped pid " + std::to_string(pid) + " (" + dir.string() + ")");
}

void remove_dir(const fs::path& dir) {
  fs::remove_all(dir);
  log("removed " + dir.string());
}

int cmd_start(Args args) {
  ZkServerOptions o = run_options();
  std::optional<fs::path> dir;
  bool env = false;
  while (!args.done()) {
    const std::string& a = args.take();
    if (a == "--port") o.port = args.number(a, "a number");
    else if (a == "--dir") dir = args.value(a);
    else if (a == "--tick") o.tick = milliseconds(args.number(a, "milliseconds"));
    else if (a == "--min-session-timeout") o.min_session_timeout = milliseconds(args.number(a, "milliseconds"));
    else if (a == "--max-session-timeout") o.max_session_timeout = milliseconds(args.number(a, "milliseconds"));
    else if (a == "--timeout") o.ready_timeout = seconds(args.number(a, "seconds"));
    else if (a == "--env") env = true;
    else if (is_help(a)) throw HelpWanted{};
    else throw UsageError{"start: unknown argument " + a};
  }
  o.dir = dir ? physical_dir(*dir) : fs::canonical(zklock::test::make_temp_dir("zklock-zk-"));
  if (auto pid = ZkServer::running_pid(o.dir))
    throw HarnessError("a server is already running in " + o.dir.string() + " (pid " + std::to_string(*pid) + ")");

  // A dir with a zoo.cfg is a stopped server (or member): start it again with
  // its port and data.  Otherwise a new server.
  auto server = fs::exists(o.dir / "zoo.cfg") ? ZkServer::open(o.dir, o) : std::make_unique<ZkServer>(o);
  try {
    server->start();
  } catch (const HarnessError& e) {
    log(e.what());
    log("dir kept for diagnosis: " + o.dir.string());
    return 1;
  }
  log("serving on " + server->connect_string() + ", pid " + std::to_string(server->pid()) + ", dir " +
      o.dir.string());
  print_result(env, server->connect_string(), o.dir);
  return 0;
}

// `stop D [--clean] [--timeout S]` and `ensemble stop D ...`: the same options.
struct StopArgs {
  std::optional<fs::path> dir;
  bool clean = false;
  milliseconds grace = seconds(10);
};

StopArgs parse_stop(Args& args) {
  StopArgs out;
  while (!args.done()) {
    const std::string& a = args.take();
    if (a == "--clean") out.clean = true;
    else if (a == "--timeout") out.grace = seconds(args.number(a, "seconds"));
    else if (is_help(a)) throw HelpWanted{};
    else if (a.starts_with("-")) throw UsageError{args.context() + ": unknown option " + a};
    else if (out.dir) throw UsageError{args.context() + ": one dir only"};
    else out.dir = a;
  }
  return out;
}

int cmd_stop(Args args) {
  auto [dir, clean, grace] = parse_stop(args);
  if (!dir) throw UsageError{args.context() + ": which dir?"};
  if (!fs::is_directory(*dir)) throw HarnessError("no such dir: " + dir->string());
  const fs::path d = fs::canonical(*dir);
  if (!fs::exists(d / "zoo.cfg")) throw HarnessError(d.string() + " is not a zk-server dir (no zoo.cfg)");
  stop_dir(d, grace);
  if (clean) remove_dir(d);
  return 0;
}

int cmd_status(Args args) {
  if (args.done()) throw UsageError{"status: give a zk-server dir"};
  const fs::path dir = args.take();
  if (!fs::exists(dir / "zoo.cfg")) throw UsageError{"status: give a zk-server dir"};
  const fs::path d = fs::canonical(dir);
  auto server = ZkServer::open(d, run_options());
  if (server->running() && zklock::test::four_letter_word("127.0.0.1", server->port(), "ruok") == "imok") {
    std::cout << server->connect_string() << "\n";
    return 0;
  }
  log("not serving: " + d.string());
  return 1;
}

int ensemble_start(Args args) {
  ZkServerOptions o = run_options();
  o.ready_timeout = seconds(60);
  std::optional<fs::path> dir;
  bool env = false;
  while (!args.done()) {
    const std::string& a = args.take();
    if (a == "--dir") dir = args.value(a);
    else if (a == "--tick") o.tick = milliseconds(args.number(a, "milliseconds"));
    else if (a == "--timeout") o.ready_timeout = seconds(args.number(a, "seconds"));
    else if (a == "--env") env = true;
    else if (is_help(a)) throw HelpWanted{};
    else throw UsageError{"ensemble start: unknown argument " + a};
  }
  o.dir = dir ? physical_dir(*dir) : fs::canonical(zklock::test::make_temp_dir("zklock-ens-"));
  // Members already running are kept; stopped ones start again with their data.
  ZkEnsemble ensemble = fs::exists(o.dir / "1" / "zoo.cfg") ? ZkEnsemble::open(o.dir, o) : ZkEnsemble(o);
  try {
    ensemble.start();
  } catch (const HarnessError& e) {
    log(e.what());
    for (int i = 0; i < ZkEnsemble::kSize; ++i) ensemble.member(i).stop(seconds(5));
    log("dir kept for diagnosis: " + o.dir.string());
    return 1;
  }
  log("ensemble serving: " + ensemble.connect_string() + ", dir " + o.dir.string());
  print_result(env, ensemble.connect_string(), o.dir);
  return 0;
}

int ensemble_stop(Args args) {
  auto [dir, clean, grace] = parse_stop(args);
  if (!dir || !fs::exists(*dir / "1" / "zoo.cfg")) throw UsageError{"ensemble stop: give an ensemble dir"};
  const fs::path d = fs::canonical(*dir);
  for (int id = 1; id <= ZkEnsemble::kSize; ++id) stop_dir(d / std::to_string(id), grace);
  if (clean) remove_dir(d);
  return 0;
}

int run(std::vector<std::string> words) {
  if (words.empty()) {
    std::cerr << kUsage;
    return 2;
  }
  const std::string command = words.front();
  words.erase(words.begin());
  if (command == "start") return cmd_start(Args("start", words));
  if (command == "stop") return cmd_stop(Args("stop", words));
  if (command == "status") return cmd_status(Args("status", words));
  if (command == "ensemble") {
    const std::string sub = words.empty() ? "" : words.front();
    if (!words.empty()) words.erase(words.begin());
    if (sub == "start") return ensemble_start(Args("ensemble start", words));
    if (sub == "stop") return ensemble_stop(Args("ensemble stop", words));
    throw UsageError{"ensemble: start or stop"};
  }
  if (is_help(command) || command == "help") {
    std::cout << kUsage;
    return 0;
  }
  throw UsageError{"unknown command " + command};
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return run(std::vector<std::string>(argv + 1, argv + argc));
  } catch (const HelpWanted&) {
    std::cout << kUsage;
    return 0;
  } catch (const UsageError& e) {
    log(e.message);
    std::cerr << "Run 'zk-server --help' for usage.\n";
    return 2;
  } catch (const std::exception& e) {
    log(e.what());
    return 1;
  }
}
