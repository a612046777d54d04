// run_to_exit: a program run to its end through ChildProcess, the harness's
// one way of starting processes.
#include <csignal>

#include "child_process.hpp"

namespace zklock::test {

using detail::remaining;

std::string RunResult::describe() const {
  std::string text = (timed_out ? "killed at the deadline" : "exit " + std::to_string(code)) + " after " +
                     std::to_string(took.count()) + " ms";
  return text + "\n--- stdout ---\n" + out + "--- stderr ---\n" + err;
}

RunResult run_to_exit(SpawnOptions options, milliseconds timeout) {
  const TempDir dir("zklock-run-");
  options.output_file.reset();
  options.capture_stdout = true;
  options.stderr_file = dir / "stderr";
  const auto start = Clock::now();
  const auto deadline = start + timeout;
  ChildProcess child = ChildProcess::spawn(options);
  RunResult r;
  auto out = child.read_to_end(remaining(deadline));
  auto status = child.wait_exit(remaining(deadline));
  if (!out || !status) {
    r.timed_out = true;
    child.signal(SIGKILL);
    status = child.wait_exit(milliseconds(10000));
    if (!out) out = child.read_to_end(milliseconds(1000));
  }
  r.out = out.value_or("");
  r.err = read_file(dir / "stderr");
  r.took = std::chrono::duration_cast<milliseconds>(Clock::now() - start);
  if (status) r.code = status->exited() ? status->exit_code() : status->signaled() ? 128 + status->term_signal() : -1;
  return r;
}

}  // namespace zklock::test
