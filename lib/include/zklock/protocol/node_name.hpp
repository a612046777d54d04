// The lock node names: their layout, parser and builder, shared by the recipe, the detector and the CLI.
//
// Protocol module (zklock/protocol/): for zklock's own tools (detector, CLI)
// and for clients in other languages, not for applications, whose API is
// the headers directly in zklock/.
//
// docs/protocol.md is the normative description; keep the two in step.
//
//   <lock path>/<mode>_<owner key>_<guid>_<sequence>
//
//   mode       'w' (exclusive) or 'r' (shared)
//   owner key  FNV-1a 64 of the owner id's UTF-8 bytes, 16 lower-case hex digits
//   guid       32 lower-case hex digits, fresh for every acquisition attempt
//   sequence   ZooKeeper's sequential suffix: the text after the last '_',
//              a signed 32-bit decimal ("0000000042", "-2147483648")
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "zklock/mode.hpp"
#include "zklock/path.hpp"  // split_path, validate_lock_path: node names live under lock paths

namespace zklock::protocol {

// 64-bit FNV-1a (offset basis 0xcbf29ce484222325, prime 0x100000001b3) of
// `bytes`. Stable across processes, platforms, languages and releases: it is
// part of the protocol (owner keys, stripe selection). Never std::hash.
std::uint64_t fnv1a64(std::string_view bytes) noexcept;

// The owner key for an owner id: fnv1a64 as 16 lower-case hex digits.
std::string owner_key(std::string_view owner_id);

struct LockNodeName {
  Mode mode = Mode::exclusive;
  std::string owner_key;   // 16 hex digits
  std::string guid;        // 32 hex digits
  std::int32_t sequence = 0;
  std::string name;        // the whole child name, as listed
};

// Parses a child name of a lock path. Returns nullopt for anything that is
// not a zklock node ("foreign" children, which the recipe ignores).
std::optional<LockNodeName> parse_lock_node_name(std::string_view name) noexcept;

// The name handed to create(EPHEMERAL_SEQUENTIAL): everything but the suffix.
std::string lock_node_prefix(Mode mode, std::string_view owner_key, std::string_view guid);

// A fresh 128-bit random GUID as 32 lower-case hex digits.
std::string new_guid();

// Wrap-aware order of two sequence numbers of one parent (serial-number
// arithmetic over the signed 32-bit counter): negative when `a` was issued
// before `b`, zero when equal, positive after. Sound while the live nodes of
// one queue span fewer than 2^31 sequence numbers, which ZooKeeper's limits
// on children guarantee. Equal values happen on servers whose counter
// saturates at 2147483647 (ZooKeeper 3.8.0); callers order ties by czxid.
int compare_sequence(std::int32_t a, std::int32_t b) noexcept;

}  // namespace zklock::protocol
