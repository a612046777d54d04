// ChildProcess: fork/exec with only async-signal-safe calls in the child,
// group signals, bounded waits and line reads.
#include "child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <iterator>

extern char** environ;

namespace zklock::test {

using detail::errno_text;
using detail::poll_pause;
using detail::remaining;

namespace {

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

// True while `pid` exists and is not a zombie (a zombie still takes signals
// but will never act on them).  For processes we cannot waitpid.
bool alive(pid_t pid) {
  if (::kill(pid, 0) != 0 && errno != EPERM) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string text((std::istreambuf_iterator<char>(stat)), std::istreambuf_iterator<char>());
  // "pid (comm) S ...": comm may hold spaces and parentheses; the state
  // follows the last ')'.
  auto close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return false;
  return text[close + 2] != 'Z';
}

}  // namespace

bool ExitStatus::exited() const { return known && WIFEXITED(raw); }
int ExitStatus::exit_code() const { return WEXITSTATUS(raw); }
bool ExitStatus::signaled() const { return known && WIFSIGNALED(raw); }
int ExitStatus::term_signal() const { return WTERMSIG(raw); }
std::string ExitStatus::describe() const {
  if (!known) return "exited (status unknown: not our child)";
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
    bool dropped = std::any_of(options.env_drop_prefixes.begin(), options.env_drop_prefixes.end(),
                               [&](auto& prefix) { return key.starts_with(prefix); });
    if (!overridden && !dropped) env_strings.emplace_back(kv);
  }
  for (auto& [k, v] : options.env) env_strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);

  std::string out_file = options.output_file ? options.output_file->string() : "";
  std::string err_file = !options.output_file && options.stderr_file ? options.stderr_file->string() : "";
  std::string cwd = options.cwd.string();
  bool capture = !options.output_file && options.capture_stdout;

  int out_pipe[2] = {-1, -1};
  if (capture && ::pipe2(out_pipe, O_CLOEXEC) != 0) throw HarnessError(errno_text("pipe2", errno));
  int in_pipe[2] = {-1, -1};
  if (options.pipe_stdin && ::pipe2(in_pipe, O_CLOEXEC) != 0) {
    int e = errno;
    if (capture) ::close(out_pipe[0]), ::close(out_pipe[1]);
    throw HarnessError(errno_text("pipe2", e));
  }
  auto close_in = [&] {
    if (options.pipe_stdin) ::close(in_pipe[0]), ::close(in_pipe[1]);
  };
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) {
    int e = errno;
    if (capture) ::close(out_pipe[0]), ::close(out_pipe[1]);
    close_in();
    throw HarnessError(errno_text("pipe2", e));
  }
  pid_t parent = ::getpid();

  pid_t pid = ::fork();
  if (pid < 0) {
    int e = errno;
    if (capture) ::close(out_pipe[0]), ::close(out_pipe[1]);
    close_in();
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
    if (options.new_session) {
      ::setsid();
    } else {
      ::setpgid(0, 0);
    }
    if (options.die_with_parent) {
      ::prctl(PR_SET_PDEATHSIG, SIGKILL);
      if (::getppid() != parent) ::_exit(127);  // parent already gone
    }
    // Signal dispositions and mask are inherited; give the child defaults.
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    ::signal(SIGPIPE, SIG_DFL);
    if (in_pipe[0] >= 0) {
      ::dup2(in_pipe[0], 0);
    } else {
      int devnull = ::open("/dev/null", O_RDONLY);
      if (devnull < 0) fail(errno);
      ::dup2(devnull, 0);
    }
    if (!out_file.empty()) {
      int fd = ::open(out_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd < 0) fail(errno);
      ::dup2(fd, 1);
      ::dup2(fd, 2);
    } else if (capture) {
      ::dup2(out_pipe[1], 1);
    }
    if (!err_file.empty()) {
      int fd = ::open(err_file.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (fd < 0) fail(errno);
      ::dup2(fd, 2);
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
  if (options.pipe_stdin) {
    ::close(in_pipe[0]);
    child.stdin_fd_ = in_pipe[1];
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

ChildProcess ChildProcess::adopt(pid_t pid) {
  if (pid <= 0) throw HarnessError("adopt: bad pid " + std::to_string(pid));
  ChildProcess process;
  process.pid_ = pid;
  process.adopted_ = true;
  return process;
}

void ChildProcess::release() {
  close_stdout();
  close_stdin();
  pid_ = -1;
  adopted_ = false;
  status_.reset();
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept { *this = std::move(other); }

ChildProcess& ChildProcess::operator=(ChildProcess&& other) noexcept {
  if (this != &other) {
    if (pid_ > 0 && !status_) {
      signal(SIGKILL);
      reap_blocking_bounded(milliseconds(5000));
    }
    close_stdout();
    close_stdin();
    pid_ = std::exchange(other.pid_, -1);
    stdin_fd_ = std::exchange(other.stdin_fd_, -1);
    adopted_ = std::exchange(other.adopted_, false);
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
  close_stdin();
}

void ChildProcess::close_stdout() {
  if (stdout_fd_ >= 0) ::close(stdout_fd_);
  stdout_fd_ = -1;
}

void ChildProcess::close_stdin() {
  if (stdin_fd_ >= 0) ::close(stdin_fd_);
  stdin_fd_ = -1;
}

bool ChildProcess::write_line(std::string_view line) {
  if (stdin_fd_ < 0) return false;
  std::string text(line);
  text += '\n';
  std::size_t off = 0;
  while (off < text.size()) {
    // MSG_NOSIGNAL is for sockets; a closed pipe raises SIGPIPE unless ignored,
    // so callers that write to children ignore SIGPIPE (zklock-bench does).
    ssize_t n = ::write(stdin_fd_, text.data() + off, text.size() - off);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    off += static_cast<std::size_t>(n);
  }
  return true;
}

bool ChildProcess::running() {
  if (pid_ <= 0 || status_) return false;
  if (adopted_) {
    if (alive(pid_)) return true;
    status_ = ExitStatus{0, false};
    return false;
  }
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
    if (!fill_buffer(deadline)) return std::nullopt;
  }
}

bool ChildProcess::fill_buffer(Clock::time_point deadline) {
  if (stdout_fd_ < 0) {
    stdout_eof_ = true;
    return true;
  }
  while (true) {
    pollfd p{stdout_fd_, POLLIN, 0};
    int r = ::poll(&p, 1, static_cast<int>(remaining(deadline).count()));
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;
    char buf[4096];
    ssize_t n = ::read(stdout_fd_, buf, sizeof buf);
    if (n > 0) {
      buffer_.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
      stdout_eof_ = true;
    }
    return true;
  }
}

std::optional<std::string> ChildProcess::read_to_end(milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (!stdout_eof_) {
    if (!fill_buffer(deadline)) return std::nullopt;
  }
  return std::exchange(buffer_, std::string());
}

std::optional<std::string> ChildProcess::read_until(std::string_view needle, milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  while (true) {
    auto line = read_line(remaining(deadline));
    if (!line) return std::nullopt;
    if (line->find(needle) != std::string::npos) return line;
  }
}

}  // namespace zklock::test
