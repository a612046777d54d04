// Every path zklock keeps its own metadata under: the /zklock subtree.
//
// Protocol module (zklock/protocol/): for zklock's own tools (detector, CLI)
// and for clients in other languages, not for applications, whose API is
// the headers directly in zklock/.
//
// docs/protocol.md is the normative description; keep the two in step.
//
//   /zklock                        persistent; created on first use
//   /zklock/ensemble-id            persistent; a UUID, the fencing tokens' ensemble part
//   /zklock/revocations/<node>     persistent; one revocation record per deleted lock node
//   /zklock/detector/c_<guid>_<n>  ephemeral sequential; the detectors' election candidates
//
// Lock paths are never inside /zklock (validate_lock_path()).
#pragma once

#include <charconv>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "zklock/path.hpp"

namespace zklock::protocol {

inline constexpr std::string_view kMetadataRoot = "/zklock";
inline constexpr std::string_view kEnsembleIdPath = "/zklock/ensemble-id";
inline constexpr std::string_view kRevocationsPath = "/zklock/revocations";
inline constexpr std::string_view kElectionPath = "/zklock/detector";

// The candidate-name prefix a detector creates under `election_dir` (its
// sequential suffix follows): "<dir>/c_<guid>_".
inline std::string election_candidate_prefix(std::string_view election_dir, std::string_view guid) {
  return join_path(election_dir, "c_" + std::string(guid) + "_");
}

struct ElectionCandidateName {
  std::string_view guid;
  std::int32_t sequence = 0;
};

// Parses a candidate's child name "c_<guid>_<seq>" (seq: ZooKeeper's signed
// 32-bit sequential suffix); nullopt for anything else.
inline std::optional<ElectionCandidateName> parse_election_candidate(std::string_view name) noexcept {
  if (!name.starts_with("c_")) return std::nullopt;
  const auto us = name.rfind('_');
  if (us <= 2 || us + 1 >= name.size()) return std::nullopt;  // non-empty guid and suffix
  std::int64_t v = 0;
  const char* first = name.data() + us + 1;
  const char* last = name.data() + name.size();
  auto [end, ec] = std::from_chars(first, last, v);
  if (ec != std::errc() || end != last || v < INT32_MIN || v > INT32_MAX) return std::nullopt;
  return ElectionCandidateName{name.substr(2, us - 2), static_cast<std::int32_t>(v)};
}

// True for /zklock and every path below it.
constexpr bool is_metadata_path(std::string_view path) noexcept {
  return path == kMetadataRoot ||
         (path.size() > kMetadataRoot.size() && path.starts_with(kMetadataRoot) && path[kMetadataRoot.size()] == '/');
}

}  // namespace zklock::protocol
