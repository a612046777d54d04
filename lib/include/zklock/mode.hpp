// zklock::Mode — how a lock is held: exclusive (one writer) or shared (readers together).
//
// Part of the user's API (Lease::mode(), FairSharedMutex); the node-name
// letter each mode is written as on ZooKeeper is zklock/protocol/node_name.hpp.
#pragma once

#include <string_view>

namespace zklock {

enum class Mode { exclusive, shared };

std::string_view mode_name(Mode m) noexcept;  // "exclusive" / "shared"

}  // namespace zklock
