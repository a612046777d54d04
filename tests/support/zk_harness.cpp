#include "zk_harness.hpp"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <condition_variable>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>

extern char** environ;

namespace zklock::test {
namespace fs = std::filesystem;

namespace {

constexpr milliseconds kPoll{20};

std::string errno_text(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

milliseconds remaining(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  return std::max(left, milliseconds(0));
}

// Sleeps one poll interval, but never past `deadline`.
void poll_pause(Clock::time_point deadline) {
  std::this_thread::sleep_for(std::min(kPoll, remaining(deadline)));
}

bool keep_dirs() {
  const char* v = std::getenv("ZKLOCK_TEST_KEEP_ZK");
  return v != nullptr && std::string_view(v) == "1";
}

std::string last_lines(const fs::path& file, std::size_t lines) {
  std::ifstream in(file);
  if (!in) return "";
  std::deque<std::string> tail;
  std::string line;
  while (std::getline(in, line)) {
    tail.push_back(line);
    if (tail.size() > lines) tail.pop_front();
  }
  std::string out;
  for (auto& l : tail) out += l + "\n";
  return out;
}

fs::path make_temp_dir(const std::string& prefix) {
  fs::path base = fs::temp_directory_path();
  std::string templ = (base / (prefix + "XXXXXX")).string();
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) throw HarnessError(errno_text("mkdtemp " + templ, errno));
  return fs::path(buf.data());
}

// PATH lookup done in the parent, so the child only calls execve.
std::string resolve_executable(const std::string& name) {
  if (name.find('/') != std::string::npos) return name;
  const char* path = std::getenv("PATH");
  std::string_view dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  while (!dirs.empty()) {
    auto colon = dirs.find(':');
    std::string dir(dirs.substr(0, colon));
    dirs = colon == std::string_view::npos ? std::string_view() : dirs.substr(colon + 1);
    if (dir.empty()) dir = ".";
    std::string candidate = dir + "/" + name;
    if (::access(candidate.c_str(), X_OK) == 0) return candidate;
  }
  throw HarnessError("spawn: " + name + " not found in PATH");
}

}  // namespace

// ---------------------------------------------------------------------------
// Ports and four-letter words

int free_loopback_port() {
  // Below the ephemeral range (ip_local_port_range), so outgoing connections
  // never hold the port.  A per-process random start and a used-set keep
  // parallel test binaries and repeated picks apart.
  static std::mutex mu;
  static std::set<int> handed_out;
  static std::mt19937 rng(static_cast<unsigned>(::getpid()) ^
                          static_cast<unsigned>(Clock::now().time_since_epoch().count()));
  int low = 32768;
  {
    std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
    int lo = 0, hi = 0;
    if (range >> lo >> hi && lo > 12000) low = lo;
  }
  const int first = 10000, last = low - 1;
  std::lock_guard lock(mu);
  std::uniform_int_distribution<int> pick(first, last);
  for (int attempt = 0; attempt < 500; ++attempt) {
    int port = pick(rng);
    if (handed_out.count(port) != 0) continue;
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw HarnessError(errno_text("socket", errno));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    // No SO_REUSEADDR: a port in TIME_WAIT or in use is refused, as wanted.
    int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::close(fd);
    if (rc == 0) {
      handed_out.insert(port);
      return port;
    }
  }
  throw HarnessError("free_loopback_port: no free port found in 500 tries");
}

std::optional<std::string> four_letter_word(const std::string& host, int port,
                                            std::string_view word, milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return std::nullopt;
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};

  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) return std::nullopt;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS) return std::nullopt;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(remaining(deadline).count())) != 1) return std::nullopt;
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) return std::nullopt;
  }
  std::size_t sent = 0;
  while (sent < word.size()) {
    ssize_t n = ::send(fd, word.data() + sent, word.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) return std::nullopt;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(remaining(deadline).count())) != 1) return std::nullopt;
  }
  ::shutdown(fd, SHUT_WR);
  std::string answer;
  char buf[4096];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      answer.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) return answer;  // the server closes after answering
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    int left = static_cast<int>(remaining(deadline).count());
    if (left <= 0 || ::poll(&p, 1, left) != 1) return std::nullopt;
  }
}

std::optional<std::int64_t> Mntr::counter(std::string_view key) const {
  auto it = values.find(std::string(key));
  if (it == values.end()) return std::nullopt;
  std::int64_t v = 0;
  const std::string& s = it->second;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<std::string> Mntr::text(std::string_view key) const {
  auto it = values.find(std::string(key));
  if (it == values.end()) return std::nullopt;
  return it->second;
}

Mntr parse_mntr(std::string_view text) {
  Mntr out;
  while (!text.empty()) {
    auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    auto tab = line.find('\t');
    if (tab == std::string_view::npos || tab == 0) continue;
    out.values[std::string(line.substr(0, tab))] = std::string(line.substr(tab + 1));
  }
  return out;
}

// ---------------------------------------------------------------------------
// ExitStatus and ChildProcess

bool ExitStatus::exited() const { return WIFEXITED(raw); }
int ExitStatus::exit_code() const { return WEXITSTATUS(raw); }
bool ExitStatus::signaled() const { return WIFSIGNALED(raw); }
int ExitStatus::term_signal() const { return WTERMSIG(raw); }
std::string ExitStatus::describe() const {
  if (exited()) return "exit " + std::to_string(exit_code());
  if (signaled()) return "signal " + std::to_string(term_signal());
  return "status " + std::to_string(raw);
}

ChildProcess ChildProcess::spawn(const SpawnOptions& options) {
  if (options.argv.empty()) throw HarnessError("spawn: empty argv");
  // Everything the child needs is built before fork: after fork in a
  // multi-threaded process only async-signal-safe calls are allowed.
  std::string exe = resolve_executable(options.argv[0]);
  std::vector<char*> argv;
  for (auto& a : options.argv) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);

  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) {
    std::string_view kv(*e);
    std::string_view key = kv.substr(0, kv.find('='));
    bool overridden = std::any_of(options.env.begin(), options.env.end(),
                                  [&](auto& p) { return p.first == key; });
    if (!overridden) env_strings.emplace_back(kv);
  }
  for (auto& [k, v] : options.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::string out_file = options.output_file ? options.output_file->string() : "";
  std::string cwd = options.cwd.string();
  bool capture = !options.output_file && options.capture_stdout;

  int out_pipe[2] = {-1, -1};
  if (capture && ::pipe2(out_pipe, O_CLOEXEC) != 0) throw HarnessError(errno_text("pipe2", errno));
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    int e = errno;
    if (capture) ::close(out_pipe[0]), ::close(out_pipe[1]);
    throw HarnessError(errno_text("pipe2", e));
  }
  pid_t parent = ::getpid();

  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    if (capture) ::close(out_pipe[0]), ::close(out_pipe[1]);
    ::close(err_pipe[0]);
    ::close(err_pipe[1]);
    throw HarnessError(errno_text("fork", e));
  }
  if (pid == 0) {
    // Child: async-signal-safe calls only.  Report failures as errno through
    // err_pipe (close-on-exec, so a successful exec closes it silently).
    auto fail = [&](int err) {
      ssize_t ignored = ::write(err_pipe[1], &err, sizeof err);
      (void)ignored;
      ::_exit(127);
    };
    ::setpgid(0, 0);
    if (options.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // parent already gone
    }
    // Signal dispositions and mask are inherited; give the child defaults.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    int devnull = ::open("/dev/null", O_RDONLY);
    if (devnull < 0) fail(errno);
    ::dup2(devnull, 0);
    if (!out_file.empty()) {
      int fd = ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd < 0) fail(errno);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    } else if (capture) {
      ::dup2(out_pipe[1], 1);
    }
    // Nothing else of the parent's (client sockets, pipes) leaks into the child.
    if (::close_range(3, ~0U, CLOSE_RANGE_CLOEXEC) != 0) {
      for (int fd = 3; fd < 4096; ++fd) ::fcntl(fd, F_SETFD, FD_CLOEXEC);  // kernels before 5.11
    }
    if (!cwd.empty() && ::chdir(cwd.c_str()) != 0) fail(errno);
    ::execve(exe.c_str(), argv.data(), envp.data());
    fail(errno);
  }

  ::close(err_pipe[1]);
  ChildProcess child;
  child.pid_ = pid;
  if (capture) {
    ::close(out_pipe[1]);
    child.stdout_fd_ = out_pipe[0];
  }
  // Blocks only until exec (pipe closed) or a failure report: both immediate.
  int child_errno = 0;
  ssize_t n;
  do {
    n = ::read(err_pipe[0], &child_errno, sizeof child_errno);
  } while (n < 0 && errno == EINTR);
  ::close(err_pipe[0]);
  if (n == static_cast<ssize_t>(sizeof child_errno)) {
    child.wait_exit(milliseconds(5000));
    throw HarnessError(errno_text("spawn " + exe, child_errno));
  }
  return child;
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept { *this = std::move(other); }

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    if (pid_ > 0 && !status_) {
      signal(SIGKILL);
      reap_blocking_bounded(milliseconds(5000));
    }
    close_stdout();
    pid_ = std::exchange(other.pid_, -1);
    stdout_fd_ = std::exchange(other.stdout_fd_, -1);
    stdout_eof_ = std::exchange(other.stdout_eof_, false);
    buffer_ = std::move(other.buffer_);
    status_ = std::exchange(other.status_, std::nullopt);
  }
  return *this;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !status_) {
    signal(SIGKILL);
    reap_blocking_bounded(milliseconds(5000));
  }
  close_stdout();
}

void ChildProcess::close_stdout() {
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
  stdout_fd_ = -1;
}

bool ChildProcess::running() {
  if (pid_ <= 0 || status_) return false;
  int st = 0;
  pid_t r = ::waitpid(pid_, &st, WNOHANG);
  if (r == pid_) {
    status_ = ExitStatus{st};
    return false;
  }
  return true;
}

void ChildProcess::signal(int sig) {
  if (pid_ <= 0 || status_) return;
  // The child leads its own group; -pid reaches it and anything it forked.
  if (::kill(-pid_, sig) != 0) ::kill(pid_, sig);
}

std::optional<ExitStatus> ChildProcess::wait_exit(milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (running()) {
    if (Clock::now() >= deadline) return std::nullopt;
    poll_pause(deadline);
  }
  return status_;
}

void ChildProcess::reap_blocking_bounded(milliseconds timeout) { wait_exit(timeout); }

ExitStatus ChildProcess::terminate(milliseconds grace) {
  if (pid_ <= 0) return ExitStatus{};
  if (running()) {
    signal(SIGCONT);  // a stopped process cannot act on SIGTERM
    signal(SIGTERM);
    if (!wait_exit(grace)) {
      signal(SIGKILL);
      if (!wait_exit(milliseconds(10000)))
        throw HarnessError("pid " + std::to_string(pid_) + " survived SIGKILL for 10 s");
    }
  }
  return *status_;
}

std::optional<std::string> ChildProcess::read_line(milliseconds timeout) {
  if (stdout_fd_ < 0 && buffer_.empty()) return std::nullopt;
  auto deadline = Clock::now() + timeout;
  while (true) {
    auto nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      buffer_.erase(0, nl + 1);
      return line;
    }
    if (stdout_eof_) {
      if (buffer_.empty()) return std::nullopt;
      return std::exchange(buffer_, std::string());
    }
    int left = static_cast<int>(remaining(deadline).count());
    pollfd p{stdout_fd_, POLLIN, 0};
    int r = ::poll(&p, 1, left);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return std::nullopt;
    char buf[4096];
    ssize_t n = ::read(stdout_fd_, buf, sizeof buf);
    if (n > 0) {
      buffer_.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      stdout_eof_ = true;
    }
  }
}

std::optional<std::string> ChildProcess::read_until(std::string_view needle, milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (true) {
    auto line = read_line(remaining(deadline));
    if (!line) return std::nullopt;
    if (line->find(needle) != std::string::npos) return line;
  }
}

// ---------------------------------------------------------------------------
// ZkServer

namespace {

const char* kZkJar = "/usr/share/java/zookeeper.jar";
const char* kSlf4jSimple = "/usr/share/java/slf4j-simple.jar";
const char* kSlf4jNop = "/usr/share/java/slf4j-nop.jar";

std::string java_binary() {
  if (const char* j = std::getenv("ZKLOCK_JAVA"); j != nullptr && *j != '\0') return j;
#ifdef ZKLOCK_JAVA_EXECUTABLE
  if (std::string_view(ZKLOCK_JAVA_EXECUTABLE).size() > 0) return ZKLOCK_JAVA_EXECUTABLE;
#endif
  return "java";
}

}  // namespace

ZkServer::ZkServer(ZkServerOptions options) : options_(std::move(options)) {
  dir_ = make_temp_dir(options_.my_id > 0 ? "zklock-zk" + std::to_string(options_.my_id) + "-"
                                          : "zklock-zk-");
  fs::create_directories(zk_data_dir());
  port_was_picked_ = options_.port == 0;
  port_ = port_was_picked_ ? free_loopback_port() : options_.port;
  write_config();
}

ZkServer::~ZkServer() {
  try {
    stop(milliseconds(3000));
  } catch (...) {
    // Destructors never throw; ChildProcess's own destructor still SIGKILLs.
  }
  if (!keep_dirs()) {
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
  std::string classpath = kZkJar;
  if (fs::exists(kSlf4jSimple)) classpath += std::string(":") + kSlf4jSimple;
  for (const auto& jar : options_.extra_classpath) classpath += ":" + jar;
  SpawnOptions spawn;
  spawn.argv = {java_binary(),
                "-Xmx" + std::to_string(options_.java_heap_mb) + "m",
                "-XX:+UseSerialGC",
                "-XX:TieredStopAtLevel=1",  // faster JVM start; the server is not CPU-bound in tests
                "-Dorg.slf4j.simpleLogger.logFile=" + log_file().string(),
                "-Dorg.slf4j.simpleLogger.showDateTime=true",
                "-Dzookeeper.jmx.log4j.disable=true",
                "-cp", classpath,
                "org.apache.zookeeper.server.quorum.QuorumPeerMain",
                (dir_ / "zoo.cfg").string()};
  spawn.output_file = dir_ / "zk.out";
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

void ZkServer::pause() {
  if (!running()) throw HarnessError("ZkServer::pause: not running");
  process_.signal(SIGSTOP);
  paused_ = true;
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

// ---------------------------------------------------------------------------
// ZkEnsemble

ZkEnsemble::ZkEnsemble(ZkServerOptions base) {
  std::vector<std::string> lines;
  std::vector<int> client_ports;
  for (int id = 1; id <= kSize; ++id) {
    int quorum = free_loopback_port();
    int election = free_loopback_port();
    lines.push_back("server." + std::to_string(id) + "=127.0.0.1:" + std::to_string(quorum) + ":" +
                    std::to_string(election));
    client_ports.push_back(free_loopback_port());
  }
  for (int id = 1; id <= kSize; ++id) {
    ZkServerOptions o = base;
    o.my_id = id;
    o.server_lines = lines;
    o.port = client_ports[static_cast<std::size_t>(id - 1)];
    members_.push_back(std::make_unique<ZkServer>(o));
  }
}

void ZkEnsemble::start() {
  for (auto& m : members_) m->launch();
  wait_serving(kSize, Clock::now() + members_.front()->options().ready_timeout);
}

void ZkEnsemble::wait_serving(int count, Clock::time_point deadline) {
  while (true) {
    int serving = 0;
    std::string state;
    for (std::size_t i = 0; i < members_.size(); ++i) {
      auto& m = *members_[i];
      std::string mode = "down";
      if (m.running() && !m.paused()) {
        auto srvr = four_letter_word("127.0.0.1", m.port(), "srvr", milliseconds(500));
        if (srvr && srvr->find("Mode: leader") != std::string::npos) mode = "leader";
        else if (srvr && srvr->find("Mode: follower") != std::string::npos) mode = "follower";
        else mode = "not serving";
      } else if (m.paused()) {
        mode = "paused";
      }
      if (mode == "leader" || mode == "follower") ++serving;
      state += " member" + std::to_string(i) + "=" + mode;
    }
    if (serving >= count) return;
    if (Clock::now() >= deadline) {
      std::string logs;
      for (auto& m : members_) logs += "--- " + m->connect_string() + " ---\n" + m->log_tail(15);
      throw HarnessError("ensemble: " + std::to_string(serving) + " of " + std::to_string(count) +
                         " members serving by the deadline:" + state + "\n" + logs);
    }
    poll_pause(deadline);
  }
}

void ZkEnsemble::stop() {
  for (auto& m : members_) m->stop();
}

std::string ZkEnsemble::connect_string() const {
  std::string out;
  for (auto& m : members_) out += (out.empty() ? "" : ",") + m->connect_string();
  return out;
}

std::optional<int> ZkEnsemble::leader_index() {
  for (std::size_t i = 0; i < members_.size(); ++i) {
    auto& m = *members_[i];
    if (!m.running() || m.paused()) continue;
    auto srvr = four_letter_word("127.0.0.1", m.port(), "srvr", milliseconds(500));
    if (srvr && srvr->find("Mode: leader") != std::string::npos) return static_cast<int>(i);
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------
// Shared server and unique paths

ZkServer& shared_server() {
  // Constructed on first use (thread-safe), destroyed at exit; PDEATHSIG
  // covers a crash.
  static ZkServer server;
  static std::once_flag started;
  std::call_once(started, [] { server.start(); });
  return server;
}

std::string unique_path(std::string_view prefix) {
  static std::atomic<unsigned> counter{0};
  static const unsigned salt = std::random_device{}();
  std::ostringstream out;
  out << "/" << prefix << "-" << ::getpid() << "-" << counter.fetch_add(1) << "-" << std::hex
      << (salt & 0xffffffu);
  return out.str();
}

// ---------------------------------------------------------------------------
// ZkHandle

struct ZkHandle::Watch {
  std::mutex mu;
  std::condition_variable cv;
  int state = 0;
};

namespace {
// The C client calls this on its completion thread: only record and signal.
void handle_watcher(zhandle_t*, int type, int state, const char*, void* ctx) noexcept {
  if (type != ZOO_SESSION_EVENT || ctx == nullptr) return;
  auto* w = static_cast<ZkHandle::Watch*>(ctx);
  {
    std::lock_guard lock(w->mu);
    w->state = state;
  }
  w->cv.notify_all();
}
}  // namespace

ZkHandle ZkHandle::connect(const std::string& hosts, milliseconds session_timeout, milliseconds timeout) {
  ZkHandle h;
  h.watch_ = std::make_unique<Watch>();
  h.zh_ = zookeeper_init(hosts.c_str(), handle_watcher, static_cast<int>(session_timeout.count()),
                         nullptr, h.watch_.get(), 0);
  if (h.zh_ == nullptr) throw HarnessError(errno_text("zookeeper_init " + hosts, errno));
  std::unique_lock lock(h.watch_->mu);
  bool ok = h.watch_->cv.wait_for(lock, timeout, [&] {
    return h.watch_->state == ZOO_CONNECTED_STATE || h.watch_->state == ZOO_EXPIRED_SESSION_STATE ||
           h.watch_->state == ZOO_AUTH_FAILED_STATE;
  });
  if (!ok || h.watch_->state != ZOO_CONNECTED_STATE) {
    int st = h.watch_->state;
    lock.unlock();
    throw HarnessError("ZkHandle: no session with " + hosts + " within " + std::to_string(timeout.count()) +
                       " ms (state " + std::to_string(st) + ")");
  }
  return h;
}

ZkHandle::ZkHandle(ZkHandle&& other) noexcept { *this = std::move(other); }

ZkHandle& ZkHandle::operator=(ZkHandle&& other) noexcept {
  if (this != &other) {
    close();
    zh_ = std::exchange(other.zh_, nullptr);
    watch_ = std::move(other.watch_);
  }
  return *this;
}

ZkHandle::~ZkHandle() { close(); }

void ZkHandle::close() {
  // zookeeper_close joins the client's threads, so watch_ outlives every
  // callback that could touch it.
  if (zh_ != nullptr) zookeeper_close(zh_);
  zh_ = nullptr;
  watch_.reset();
}

std::int64_t ZkHandle::session_id() const {
  const clientid_t* id = zh_ != nullptr ? zoo_client_id(zh_) : nullptr;
  return id != nullptr ? id->client_id : 0;
}

int ZkHandle::state() const { return zh_ != nullptr ? zoo_state(zh_) : 0; }

int ZkHandle::create(const std::string& path, std::string_view data, int flags, std::string* created) {
  std::vector<char> buf(path.size() + 64);
  int rc = zoo_create(zh_, path.c_str(), data.data(), static_cast<int>(data.size()), &ZOO_OPEN_ACL_UNSAFE,
                      flags, buf.data(), static_cast<int>(buf.size()));
  if (rc == ZOK && created != nullptr) *created = buf.data();
  return rc;
}

void ZkHandle::ensure(const std::string& path) {
  int rc = create(path, "", ZOO_PERSISTENT);
  if (rc != ZOK && rc != ZNODEEXISTS)
    throw HarnessError("create " + path + ": " + zerror(rc));
}

int ZkHandle::exists(const std::string& path, Stat* stat) {
  Stat local;
  return zoo_exists(zh_, path.c_str(), 0, stat != nullptr ? stat : &local);
}

int ZkHandle::children(const std::string& path, std::vector<std::string>* out) {
  String_vector names{};
  int rc = zoo_get_children(zh_, path.c_str(), 0, &names);
  if (rc == ZOK) {
    out->clear();
    for (int i = 0; i < names.count; ++i) out->emplace_back(names.data[i]);
    deallocate_String_vector(&names);
  }
  return rc;
}

// ---------------------------------------------------------------------------
// Sequence-counter surgery

bool child_sequence_tool_available() {
#ifdef ZKLOCK_SET_CVERSION_CLASSDIR
  return std::string_view(ZKLOCK_SET_CVERSION_CLASSDIR).size() > 0 &&
         fs::exists(fs::path(ZKLOCK_SET_CVERSION_CLASSDIR) / "SetCversion.class");
#else
  return false;
#endif
}

void set_child_sequence_counter(ZkServer& server, const std::string& path, std::int32_t value, bool container) {
  if (server.options().my_id != 0)
    throw HarnessError("set_child_sequence_counter: only for a standalone server");
  if (!child_sequence_tool_available())
    throw HarnessError("set_child_sequence_counter: SetCversion.class not built (no javac at configure time?)");
#ifdef ZKLOCK_SET_CVERSION_CLASSDIR
  const bool was_running = server.running();
  if (was_running) server.stop();

  std::string classpath = std::string(kZkJar) + ":" + ZKLOCK_SET_CVERSION_CLASSDIR;
  if (fs::exists(kSlf4jNop)) classpath += std::string(":") + kSlf4jNop;
  SpawnOptions spawn;
  spawn.argv = {java_binary(), "-Xmx128m", "-XX:TieredStopAtLevel=1", "-cp", classpath, "SetCversion",
                server.zk_data_dir().string(), path, std::to_string(value)};
  if (container) spawn.argv.push_back("container");
  spawn.output_file = server.data_dir() / "set-cversion.out";
  ChildProcess tool = ChildProcess::spawn(spawn);
  auto st = tool.wait_exit(milliseconds(60000));
  if (!st) {
    tool.terminate(milliseconds(1000));
    throw HarnessError("SetCversion did not finish within 60 s");
  }
  if (!st->exited() || st->exit_code() != 0)
    throw HarnessError("SetCversion failed (" + st->describe() + "):\n" +
                       last_lines(server.data_dir() / "set-cversion.out", 30));
  if (was_running) server.start();
#else
  (void)server, (void)path, (void)value, (void)container;
#endif
}

}  // namespace zklock::test
