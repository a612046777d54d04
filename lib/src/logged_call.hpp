// Runs a call whose exception must not propagate (a noexcept release, a user's observer run from a queue): logged instead.
#pragma once

#include <exception>
#include <string_view>

#include <spdlog/logger.h>

namespace zklock::detail {

// Runs `fn`; an exception it throws is logged as "<what><subject>: <message>"
// and dropped. Nothing is formatted unless one is thrown.
template <class Fn>
void logged_call(spdlog::logger& log, std::string_view what, std::string_view subject, Fn&& fn) noexcept {
  try {
    fn();
  } catch (const std::exception& e) {
    log.error("{}{}: {}", what, subject, e.what());
  } catch (...) {
    log.error("{}{}: a non-standard exception", what, subject);
  }
}

}  // namespace zklock::detail
