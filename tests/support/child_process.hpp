// Child processes for the harness and the failure tests: spawn in an own
// process group, read stdout lines, signal the group, wait with deadlines.
#pragma once

#include <sys/types.h>

#include <filesystem>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "harness_base.hpp"

namespace zklock::test {

// How a child ended, from waitpid's status.  An adopted process (not our
// child) ends with known == false: only its parent learns how.
struct ExitStatus {
  int raw = 0;
  bool known = true;
  bool exited() const;
  int exit_code() const;     // REQUIRES: exited()
  bool signaled() const;
  int term_signal() const;   // REQUIRES: signaled()
  std::string describe() const;  // "exit 0", "signal 9", "exited (status unknown)"
};

struct SpawnOptions {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH if it has no '/'
  // Added to (or replacing in) the parent's environment.
  std::vector<std::pair<std::string, std::string>> env;
  // The parent's variables whose names start with one of these are not passed
  // on (ZKLOCK_: nothing leaks in from the developer's shell).  `env` still is.
  std::vector<std::string> env_drop_prefixes;
  // If set, stdout and stderr are appended to this file.  Otherwise stdout is
  // a pipe read with read_line() if capture_stdout, or inherited.
  std::optional<std::filesystem::path> output_file;
  bool capture_stdout = true;
  // If set (and output_file is not), stderr is appended to this file;
  // otherwise it is inherited (or goes to output_file).
  std::optional<std::filesystem::path> stderr_file;
  // stdin is a pipe written with write_line() (else /dev/null).
  bool pipe_stdin = false;
  // Working directory of the child; empty keeps the parent's.
  std::filesystem::path cwd;
  // Kill the child (SIGKILL) if the forking thread dies.  Off for processes
  // that must outlive the test binary (detached servers).
  bool die_with_parent = true;
  // setsid() instead of setpgid(): the child also leaves our session, so a
  // terminal's hangup or Ctrl-C does not reach it.  For detached servers.
  bool new_session = false;
};

// A spawned process in its own process group.  Move-only; the destructor
// SIGKILLs the group and reaps the child if it is still running.
class ChildProcess {
 public:
  // Throws HarnessError if fork or exec fails (an exec failure is reported by
  // the child through a close-on-exec pipe, so it is seen here, not later).
  static ChildProcess spawn(const SpawnOptions& options);
  // A running process that is not our child (a detached server started by an
  // earlier run), so that it can be watched and stopped like one: signals go
  // to its group, running() looks at /proc instead of waitpid, and its exit
  // status stays unknown.  REQUIRES: pid > 0 leads its own process group.
  static ChildProcess adopt(pid_t pid);

  ChildProcess() = default;
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&& other) noexcept;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;
  ~ChildProcess();

  pid_t pid() const { return pid_; }
  // True while the child has not been reaped (reaps it if it has exited).
  bool running();
  // Sends `sig` to the child's whole process group.  No-op once reaped.
  void signal(int sig);
  // Waits up to `timeout` for the child to exit; nullopt if it is still running.
  std::optional<ExitStatus> wait_exit(milliseconds timeout);
  // SIGTERM, then SIGKILL if it has not exited after `grace`; waits (bounded)
  // for the exit.  Returns how it ended.  Safe to call after it exited.
  ExitStatus terminate(milliseconds grace = milliseconds(5000));
  // The exit status once reaped.
  std::optional<ExitStatus> exit_status() const { return status_; }
  // Lets go of the process without signalling it: it keeps running and this
  // object becomes empty (the destructor no longer kills it).
  void release();

  // Next line (without '\n') of the child's stdout, or nullopt if none arrived
  // within `timeout` or stdout ended.  REQUIRES: capture_stdout, no output_file.
  std::optional<std::string> read_line(milliseconds timeout);
  // The rest of stdout up to its end, or nullopt if it has not ended within
  // `timeout` (what arrived stays buffered).  REQUIRES: as read_line.
  std::optional<std::string> read_to_end(milliseconds timeout);
  // Reads lines until one contains `needle` (returned) or the timeout passes.
  std::optional<std::string> read_until(std::string_view needle, milliseconds timeout);
  // Writes `line` and '\n' to the child's stdin; false once the child closed
  // it.  close_stdin() sends EOF.  REQUIRES: pipe_stdin.
  bool write_line(std::string_view line);
  void close_stdin();

 private:
  void reap_blocking_bounded(milliseconds timeout);
  void close_stdout();
  // One read of stdout into buffer_ (or its end noted); false if nothing
  // arrived before `deadline`.
  bool fill_buffer(Clock::time_point deadline);

  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  bool adopted_ = false;  // not our child: no waitpid, liveness from /proc
  int stdout_fd_ = -1;
  bool stdout_eof_ = false;
  std::string buffer_;
  std::optional<ExitStatus> status_;
};

// A program run to its end: its exit code (128 + signal if killed), both
// output streams, and how long it took.
struct RunResult {
  int code = -1;
  std::string out;
  std::string err;
  milliseconds took{0};
  bool timed_out = false;  // killed (SIGKILL to its group) at the deadline
  std::string describe() const;  // "exit 2 after 12 ms\n--- stdout ---\n...--- stderr ---\n..."
};

// Spawns `options` (stdout captured, stderr to a temporary file: both end up
// in the result) and waits for it to exit, at most `timeout`.
RunResult run_to_exit(SpawnOptions options, milliseconds timeout);

}  // namespace zklock::test
