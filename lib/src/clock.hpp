// The library's own clock vocabulary. Internal: the public headers spell
// std::chrono::steady_clock and std::chrono durations, so including zklock
// puts no alias and no literal operators into a user's scope.
#pragma once

#include <chrono>

namespace zklock {

// Every deadline, validity bound and timer in the library is on this clock:
// monotonic, so a wall-clock step cannot shorten or lengthen a bound.
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

}  // namespace zklock
