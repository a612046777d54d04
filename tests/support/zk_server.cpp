// ZkServer: writes zoo.cfg, starts the ZooKeeper JVM, waits until it serves,
// and stops, kills, pauses or restarts it.
#include "zk_server.hpp"

#include <charconv>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <mutex>
#include <thread>

namespace zklock::test {
namespace fs = std::filesystem;

using detail::last_lines;
using detail::poll_pause;
using detail::remaining;

namespace {

constexpr const char* kSlf4jSimple = "/usr/share/java/slf4j-simple.jar";

bool keep_dirs() {
  const char* v = std::getenv("ZKLOCK_TEST_KEEP_ZK");
  return v != nullptr && std::string_view(v) == "1";
}

// A whole non-negative decimal number, or nullopt.
std::optional<int> number(std::string_view text) {
  int v = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < 0) return std::nullopt;
  return v;
}

}  // namespace

std::string detail::java_binary() {
  if (const char* j = std::getenv("ZKLOCK_JAVA"); j != nullptr && *j != '\0') return j;
#ifdef ZKLOCK_JAVA_EXECUTABLE
  if (std::string_view(ZKLOCK_JAVA_EXECUTABLE).size() > 0) return ZKLOCK_JAVA_EXECUTABLE;
#endif
  return "java";
}

ZkServer::ZkServer(ZkServerOptions options) : options_(std::move(options)) {
  owns_dir_ = options_.dir.empty();
  dir_ = owns_dir_ ? make_temp_dir(options_.my_id > 0 ? "zklock-zk" + std::to_string(options_.my_id) + "-"
                                                      : "zklock-zk-")
                   : options_.dir;
  fs::create_directories(zk_data_dir());
  port_was_picked_ = options_.port == 0;
  port_ = port_was_picked_ ? free_loopback_port() : options_.port;
  write_config();
}

std::unique_ptr<ZkServer> ZkServer::open(const fs::path& dir, ZkServerOptions how) {
  return std::unique_ptr<ZkServer>(new ZkServer(Adopt{}, dir, std::move(how)));
}

ZkServer::ZkServer(Adopt, const fs::path& dir, ZkServerOptions how) : options_(std::move(how)), dir_(dir) {
  const fs::path cfg = dir_ / "zoo.cfg";
  std::vector<std::string> lines;
  {
    std::ifstream in(cfg);
    if (!in) throw HarnessError(dir_.string() + " holds no ZooKeeper server (no zoo.cfg)");
    for (std::string line; std::getline(in, line);) lines.push_back(line);
  }
  options_.dir = dir_;
  options_.detached = true;
  options_.my_id = 0;
  options_.server_lines.clear();
  int port = 0;
  for (const auto& line : lines) {
    auto eq = line.find('=');
    if (eq == std::string::npos) continue;
    std::string_view key(line.data(), eq);
    auto value = number(std::string_view(line).substr(eq + 1));
    if (key == "clientPort" && value) port = *value;
    if (key == "tickTime" && value) options_.tick = milliseconds(*value);
    if (key.starts_with("server.")) options_.server_lines.push_back(line);
  }
  if (!options_.server_lines.empty()) {
    std::ifstream myid(zk_data_dir() / "myid");
    if (!(myid >> options_.my_id) || options_.my_id <= 0)
      throw HarnessError(dir_.string() + ": an ensemble member without a myid");
  }
  if (auto pid = running_pid(dir_)) process_ = ChildProcess::adopt(*pid);
  if (options_.port != 0 && options_.port != port) {
    // A new client port for a stopped server; its data stays.
    if (process_.pid() > 0) throw HarnessError("cannot move the running server in " + dir_.string());
    std::ofstream out(cfg, std::ios::trunc);
    for (const auto& line : lines) {
      out << (line.starts_with("clientPort=") ? "clientPort=" + std::to_string(options_.port) : line) << "\n";
    }
    if (!out) throw HarnessError("cannot write " + cfg.string());
    port = options_.port;
  }
  if (port <= 0) throw HarnessError(cfg.string() + ": no clientPort");
  port_ = options_.port = port;
  started_once_ = true;  // the config's port is the server's identity: never moved
}

std::optional<pid_t> ZkServer::running_pid(const fs::path& dir) {
  long pid = 0;
  if (!(std::ifstream(dir / "zk.pid") >> pid) || pid <= 0) return std::nullopt;
  // The JVM's last argument is its config; a zombie's cmdline is empty.
  std::ifstream cmdline("/proc/" + std::to_string(pid) + "/cmdline", std::ios::binary);
  const std::string own_config = (dir / "zoo.cfg").string();
  for (std::string arg; std::getline(cmdline, arg, '\0');) {
    if (arg == own_config) return static_cast<pid_t>(pid);
  }
  return std::nullopt;
}

ZkServer::~ZkServer() {
  if (options_.detached) {
    process_.release();  // it outlives us by design; open() finds it again
    return;
  }
  try {
    stop(milliseconds(3000));
  } catch (...) {
    // Destructors never throw; ChildProcess's own destructor still SIGKILLs.
  }
  if (owns_dir_ && !keep_dirs()) {
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
}

void ZkServer::write_config() {
  std::ofstream cfg(dir_ / "zoo.cfg", std::ios::trunc);
  cfg << "tickTime=" << options_.tick.count() << "\n"
      << "dataDir=" << zk_data_dir().string() << "\n"
      << "clientPort=" << port_ << "\n"
      << "clientPortAddress=127.0.0.1\n"
      << "maxClientCnxns=0\n"
      << "4lw.commands.whitelist=*\n"
      << "admin.enableServer=false\n";
  if (options_.min_session_timeout) cfg << "minSessionTimeout=" << options_.min_session_timeout->count() << "\n";
  if (options_.max_session_timeout) cfg << "maxSessionTimeout=" << options_.max_session_timeout->count() << "\n";
  if (options_.my_id > 0) {
    cfg << "initLimit=10\n"
        << "syncLimit=5\n"
        << "standaloneEnabled=false\n"
        << "reconfigEnabled=false\n";
    for (auto& line : options_.server_lines) cfg << line << "\n";
    std::ofstream(zk_data_dir() / "myid", std::ios::trunc) << options_.my_id << "\n";
  }
  for (auto& line : options_.extra_config) cfg << line << "\n";
  if (!cfg) throw HarnessError("cannot write " + (dir_ / "zoo.cfg").string());
}

void ZkServer::launch() {
  if (running()) throw HarnessError("ZkServer::launch: already running, pid " + std::to_string(pid()));
  paused_ = false;
  if (!fs::exists(options_.zk_jar))
    throw HarnessError(options_.zk_jar + " not found (install the zookeeper package: scripts/install-deps)");
  std::string classpath = options_.zk_jar;
  if (fs::exists(kSlf4jSimple)) classpath += std::string(":") + kSlf4jSimple;
  for (const auto& jar : options_.extra_classpath) classpath += ":" + jar;
  SpawnOptions spawn;
  spawn.argv = {options_.java, "-Xmx" + std::to_string(options_.java_heap_mb) + "m"};
  if (!options_.jvm_defaults) {
    // Faster JVM start; the server is not CPU-bound in tests.
    spawn.argv.insert(spawn.argv.end(), {"-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"});
  }
  spawn.argv.insert(spawn.argv.end(), {"-Dorg.slf4j.simpleLogger.logFile=" + log_file().string(),
                                       "-Dorg.slf4j.simpleLogger.showDateTime=true",
                                       "-Dzookeeper.jmx.log4j.disable=true", "-cp", classpath,
                                       "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                                       (dir_ / "zoo.cfg").string()});
  spawn.output_file = dir_ / "zk.out";
  spawn.die_with_parent = !options_.detached;
  spawn.new_session = options_.detached;
  process_ = ChildProcess::spawn(spawn);
  std::ofstream(dir_ / "zk.pid", std::ios::trunc) << process_.pid() << "\n";
  started_once_ = true;
}

void ZkServer::start() {
  // Only an auto-picked port on the first start may move: a restart must keep
  // the connect string that sessions and tests hold.
  const bool may_move = port_was_picked_ && !started_once_;
  for (int attempt = 0;; ++attempt) {
    launch();
    try {
      wait_ready();
      return;
    } catch (const HarnessError&) {
      bool port_lost = last_lines(log_file(), 200).find("Address already in use") != std::string::npos;
      if (!(may_move && port_lost && attempt < 3)) {
        stop(milliseconds(2000));
        throw;
      }
      stop(milliseconds(2000));
      port_ = free_loopback_port();
      write_config();
      std::error_code ec;
      fs::remove(log_file(), ec);
    }
  }
}

void ZkServer::wait_ready(Clock::time_point deadline) {
  const std::string own_data = "dataDir=" + (zk_data_dir() / "version-2").string();
  std::string last_seen = "no answer";
  while (true) {
    if (!running()) {
      auto st = process_.exit_status();
      throw HarnessError(diagnose("server exited (" + (st ? st->describe() : "never started") +
                                  ") before serving"));
    }
    milliseconds budget = std::min(milliseconds(1000), std::max(remaining(deadline), milliseconds(50)));
    if (options_.my_id == 0) {
      auto ruok = four_letter_word("127.0.0.1", port_, "ruok", budget);
      if (ruok && *ruok == "imok") {
        // Another server may hold the port (we then die on bind): check that
        // the one answering uses our data dir.
        auto conf = four_letter_word("127.0.0.1", port_, "conf", budget);
        if (conf && conf->find(own_data) != std::string::npos) return;
        last_seen = "imok from a server that is not ours (conf: " + conf.value_or("none").substr(0, 200) + ")";
      } else if (ruok) {
        last_seen = "ruok answered '" + *ruok + "'";
      }
    } else {
      auto srvr = four_letter_word("127.0.0.1", port_, "srvr", budget);
      if (srvr && (srvr->find("Mode: leader") != std::string::npos ||
                   srvr->find("Mode: follower") != std::string::npos))
        return;
      if (srvr) last_seen = "srvr: " + srvr->substr(0, 200);
    }
    if (Clock::now() >= deadline) throw HarnessError(diagnose("not serving by the deadline; last: " + last_seen));
    poll_pause(deadline);
  }
}

void ZkServer::stop(milliseconds grace) {
  process_.terminate(grace);
  paused_ = false;
}

void ZkServer::kill9() {
  if (!running()) return;
  process_.signal(SIGKILL);
  if (!process_.wait_exit(milliseconds(10000)))
    throw HarnessError("ZkServer::kill9: pid " + std::to_string(pid()) + " survived SIGKILL");
  paused_ = false;
}

namespace {

// True when every thread of `pid` is stopped (state T or t in its stat).
bool all_threads_stopped(pid_t pid) {
  const auto dir = "/proc/" + std::to_string(pid) + "/task";
  std::error_code ec;
  bool any = false;
  for (const auto& task : std::filesystem::directory_iterator(dir, ec)) {
    std::ifstream stat(task.path() / "stat");
    std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
    const auto close = text.rfind(')');  // "tid (comm) S ...": the state follows the last ')'
    if (close == std::string::npos || close + 2 >= text.size()) continue;  // the thread ended
    const char state = text[close + 2];
    if (state != 'T' && state != 't') return false;
    any = true;
  }
  return any && !ec;
}

}  // namespace

void ZkServer::pause() {
  if (!running()) throw HarnessError("ZkServer::pause: not running");
  process_.signal(SIGSTOP);
  paused_ = true;
  // SIGSTOP lands asynchronously: until every JVM thread has stopped, one
  // may still answer a request sent after pause() returned.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  while (!all_threads_stopped(process_.pid())) {
    if (std::chrono::steady_clock::now() > deadline) throw HarnessError("ZkServer::pause: the JVM did not stop within 5 s");
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

void ZkServer::resume() {
  process_.signal(SIGCONT);
  paused_ = false;
}

bool ZkServer::running() { return process_.running(); }

std::string ZkServer::connect_string() const { return "127.0.0.1:" + std::to_string(port_); }

Mntr ZkServer::mntr() {
  auto text = four_letter_word("127.0.0.1", port_, "mntr");
  if (!text || text->empty()) throw HarnessError(diagnose("mntr: no answer"));
  return parse_mntr(*text);
}

std::string ZkServer::log_tail(std::size_t lines) const {
  std::string out = last_lines(log_file(), lines);
  std::string jvm = last_lines(dir_ / "zk.out", 10);
  if (!jvm.empty()) out += "--- zk.out ---\n" + jvm;
  return out;
}

std::string ZkServer::diagnose(const std::string& what) const {
  return "ZooKeeper " + connect_string() + " (dir " + dir_.string() + "): " + what +
         "\n--- zk.log tail ---\n" + log_tail();
}

ZkServer& shared_server() {
  // Constructed on first use (thread-safe), destroyed at exit; PDEATHSIG
  // covers a crash.
  static ZkServer server;
  static std::once_flag started;
  std::call_once(started, [] { server.start(); });
  return server;
}

}  // namespace zklock::test
