// Internal: the fence gate's durable state file: its format, its owner's lock, reading and atomic replacement.
//
// The format (version 1) is documented in zklock/fence_gate.hpp, where its
// users read it; this is its one implementation. FenceGate (fence_gate.cpp)
// decides admits and calls these under its persist lock.
#pragma once

#include <filesystem>
#include <map>
#include <optional>
#include <string>

#include "zklock/fence_gate.hpp"
#include "zklock/token.hpp"

namespace zklock::detail {

// Every resource's mark, as the file holds them (ordered: the file is sorted).
using FenceMarks = std::map<std::string, FencingToken, std::less<>>;

// Takes the exclusive flock on "<file>.lock" (one gate owns a state file at
// a time) and returns its descriptor; closing it lets go.
// Throws Error(io_error) when it cannot be opened or another gate holds it.
UniqueFd lock_fence_state(const std::filesystem::path& file);

// The marks `file` holds; nullopt when it does not exist. Throws
// Error(io_error) when it cannot be read, Error(protocol_error) naming the
// file and the fault when it is truncated, corrupted or of another version.
std::optional<FenceMarks> read_fence_state(const std::filesystem::path& file);

// Replaces `file` with `marks` atomically: a temporary file, fsync, rename,
// fsync of the directory. Throws Error(io_error); a failure before the
// rename leaves `file` as it was.
void write_fence_state(const std::filesystem::path& file, const FenceMarks& marks);

}  // namespace zklock::detail
