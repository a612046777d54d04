// What the lock tests of zklock_contract_tests share (contract_test.cpp,
// read_write_test.cpp, multi_lock_test.cpp): a session on the shared server,
// the children of a lock path, elapsed milliseconds.
#pragma once

#include <chrono>
#include <cstddef>
#include <string>

#include "zk_harness.hpp"
#include "zklock/client.hpp"
#include "zklock/error.hpp"

namespace zklock::lock_test {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

inline ClientOptions shared_opts() {
  return {.connect = test::shared_server().connect_string(), .session_timeout = 4s};
}

// Children of a lock path; an absent path (a reaped container) has none.
inline std::size_t count_children(Client& c, const std::string& path) {
  try {
    return c.children(path).size();
  } catch (const Error& e) {
    if (e.code() == Errc::no_node) return 0;
    throw;
  }
}

// Whole milliseconds since `t` (test::ms_since gives a double).
inline long long ms_since(Clock::time_point t) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - t).count();
}

}  // namespace zklock::lock_test
