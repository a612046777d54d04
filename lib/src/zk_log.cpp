// The C client's log bridge: parses ZooKeeper's log lines into spdlog levels and folds repeats.
#include "zk_log.hpp"

#include <chrono>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>

namespace zklock {
namespace {

// Set by every Client that starts, read by every C-client thread that logs
// (ThreadSanitizer caught the two racing).
std::mutex g_zk_logger_mu;
std::shared_ptr<spdlog::logger> g_zk_logger;  // GUARDED_BY(g_zk_logger_mu)

std::shared_ptr<spdlog::logger> zk_c_logger() {
  std::lock_guard lk(g_zk_logger_mu);
  return g_zk_logger;
}

}  // namespace

void set_zk_c_logger(std::shared_ptr<spdlog::logger> logger) {
  std::lock_guard lk(g_zk_logger_mu);
  g_zk_logger = std::move(logger);
}

void zk_log_callback(const char* message) noexcept {
  using namespace std::chrono_literals;
  try {
    auto logger = zk_c_logger();
    if (!logger) logger = spdlog::default_logger();
    // Messages look like "<time>:<pid>(<thread>):ZOO_WARN@func@123: text";
    // spdlog adds its own time, so keep the part from "ZOO_".
    const char* body = std::strstr(message, "ZOO_");
    std::string_view text = body ? body : message;
    spdlog::level::level_enum level = spdlog::level::debug;
    if (text.starts_with("ZOO_ERROR")) level = spdlog::level::err;
    else if (text.starts_with("ZOO_WARN")) level = spdlog::level::warn;
    else if (text.starts_with("ZOO_INFO")) level = spdlog::level::info;
    // While a server is down the C client retries every few milliseconds and
    // says the same thing each time: log a repeated line at most once a second.
    static std::mutex mu;
    static std::string last;
    static std::chrono::steady_clock::time_point last_at;
    static int repeats = 0;
    {
      std::lock_guard lk(mu);
      const auto now = std::chrono::steady_clock::now();
      const auto at = text.find(": ");
      const std::string_view key = at == std::string_view::npos ? text : text.substr(at);
      if (key == last && now - last_at < 1s) {
        ++repeats;
        return;
      }
      if (repeats > 0) logger->log(level, "zk: (previous message repeated {} times)", repeats);
      repeats = 0;
      last.assign(key);
      last_at = now;
    }
    logger->log(level, "zk: {}", text);
  } catch (...) {
  }
}

ZooLogLevel to_zoo_level(LogLevel l) {
  switch (l) {
    case LogLevel::debug: return ZOO_LOG_LEVEL_DEBUG;
    case LogLevel::info: return ZOO_LOG_LEVEL_INFO;
    case LogLevel::warn: return ZOO_LOG_LEVEL_WARN;
    case LogLevel::error: break;
  }
  return ZOO_LOG_LEVEL_ERROR;
}

}  // namespace zklock
