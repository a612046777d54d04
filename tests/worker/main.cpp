// zklock_test_worker's entry point: picks the mode named by the first argument.
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "worker.hpp"

namespace zklock::test_worker {

void print_line(const std::string& line) {
  static std::mutex mu;
  const std::string out = line + "\n";
  std::lock_guard lock(mu);
  std::fwrite(out.data(), 1, out.size(), stdout);
  std::fflush(stdout);
}

}  // namespace zklock::test_worker

int main(int argc, char** argv) {
  using namespace zklock::test_worker;
  const std::string mode = argc > 1 ? argv[1] : "";
  // A test that stops reading must not kill a worker mid-release.
  ::signal(SIGPIPE, SIG_IGN);
  // stdout is the event channel: the library's log goes to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("worker"));
  spdlog::set_level(spdlog::level::warn);
  if (const char* lvl = std::getenv("ZKLOCK_WORKER_LOG")) spdlog::set_level(spdlog::level::from_str(lvl));
  if (mode == "rounds") return run_rounds(argc - 1, argv + 1);
  if (mode == "story") return run_story(argc - 1, argv + 1);
  if (mode == "nemesis") return run_nemesis(argc - 1, argv + 1);
  if (mode == "multi" || mode == "naive" || mode == "stripes") return run_pair_mode(argc - 1, argv + 1);
  std::fprintf(stderr, "usage: zklock_test_worker rounds|story|nemesis|multi|naive|stripes ... (see tests/worker/worker.hpp)\n");
  return 64;
}
