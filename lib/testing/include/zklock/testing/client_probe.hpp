// Figures of a Client's implementation that the API does not show, for the
// benchmark (bench/) only. Not installed: a test-only seam, so bench/ links
// the library (zklock_testing) instead of including lib/src.
#pragma once

#include <chrono>
#include <cstdint>

#include "zklock/client.hpp"

namespace zklock::testing {

// Validity heartbeat writes this client has sent (docs/design.md: at most
// one per heartbeat period, none in a period with another committed write).
std::uint64_t heartbeat_writes(const Client& client);

// The heartbeat period of the client's current session.
std::chrono::milliseconds heartbeat_period(const Client& client);

}  // namespace zklock::testing
