// The detectors' leader election order: the candidate first in creation
// order leads (detector/leader.cpp; `zklock doctor` names it). Candidates
// are EPHEMERAL_SEQUENTIAL children "c_<guid>_<seq>" of
// protocol::kElectionPath, ordered by model::sort_by_creation() like lock
// nodes: suffix where unambiguous, czxid otherwise. Pure, header-only.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/queue_order.hpp"
#include "zklock/protocol/paths.hpp"

namespace zklock::model {

struct ElectionCandidate {
  std::string name;  // child name as listed
  std::string guid;
  std::int32_t sequence = 0;
  std::int64_t czxid = 0;  // 0 while unknown
};

// The candidates among a listing of the election directory (others dropped).
inline std::vector<ElectionCandidate> election_candidates(const std::vector<std::string>& names) {
  std::vector<ElectionCandidate> out;
  for (const auto& n : names) {
    if (auto c = protocol::parse_election_candidate(n)) out.push_back({n, std::string(c->guid), c->sequence, 0});
  }
  return out;
}

inline OrderKey election_order_key(const ElectionCandidate& c) { return {c.sequence, c.czxid, c.name}; }

// Indices of the candidates whose czxid the order needs and does not have
// (read them with exists(); empty in the usual case).
inline std::vector<std::size_t> election_czxids_needed(const std::vector<ElectionCandidate>& cs) {
  return czxids_needed(cs, election_order_key);
}

// Sorts into creation order; front() leads. True when the order is exact.
inline bool sort_election(std::vector<ElectionCandidate>& cs) { return sort_by_creation(cs, election_order_key); }

}  // namespace zklock::model
