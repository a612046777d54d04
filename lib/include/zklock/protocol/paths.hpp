// Every path zklock keeps its own metadata under: the /zklock subtree.
// docs/protocol.md is the normative description; keep the two in step.
//
//   /zklock                        persistent; created on first use
//   /zklock/ensemble-id            persistent; a UUID, the fencing tokens' ensemble part
//   /zklock/revocations/<node>     persistent; one revocation record per deleted lock node
//   /zklock/detector/c_<guid>_<n>  ephemeral sequential; the detectors' election candidates
//
// Lock paths are never inside /zklock (validate_lock_path()).
#pragma once

#include <string>
#include <string_view>

namespace zklock::protocol {

inline constexpr std::string_view kMetadataRoot = "/zklock";
inline constexpr std::string_view kEnsembleIdPath = "/zklock/ensemble-id";
inline constexpr std::string_view kRevocationsPath = "/zklock/revocations";
inline constexpr std::string_view kElectionPath = "/zklock/detector";

// The candidate-name prefix a detector creates under `election_dir` (its
// sequential suffix follows): "<dir>/c_<guid>_".
inline std::string election_candidate_prefix(std::string_view election_dir, std::string_view guid) {
  return std::string(election_dir) + "/c_" + std::string(guid) + "_";
}

// True for /zklock and every path below it.
constexpr bool is_metadata_path(std::string_view path) noexcept {
  return path == kMetadataRoot ||
         (path.size() > kMetadataRoot.size() && path.starts_with(kMetadataRoot) && path[kMetadataRoot.size()] == '/');
}

}  // namespace zklock::protocol
