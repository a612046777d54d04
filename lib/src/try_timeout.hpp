// The timeout of a try_acquire_for(): a zero or negative one still means
// "try once", so every front waits at least one millisecond.
#pragma once

#include <algorithm>
#include <chrono>

namespace zklock::detail {

inline std::chrono::milliseconds try_timeout(std::chrono::milliseconds timeout) {
  return std::max(timeout, std::chrono::milliseconds(1));
}

}  // namespace zklock::detail
