// Victim policies: which member of a deadlock cycle gives way.
//
// Each owner on a cycle waits there with exactly one node (its "waiting
// node"); revoking that node breaks the cycle. A policy ranks the members:
//
//   youngest         the waiting node created last (highest czxid): least work lost (default)
//   oldest           the waiting node created first (lowest czxid)
//   fewest-held      the owner holding the fewest lock nodes
//   most-held        the owner holding the most lock nodes
//   lowest-priority  the lowest priority from node data (like SQL Server's DEADLOCK_PRIORITY)
//
// Before the policy ranks anyone, two filters apply in this order:
//   1. protected owners (glob patterns) are never chosen while another member can be;
//   2. among the rest, owners matching a preferred pattern are chosen first.
// Ties fall to the smaller owner id, then the smaller node path, so every
// replica picks the same victim from the same snapshot.
//
// Patterns are shell-style globs over the owner id: '*' any run, '?' one
// character ("batch-*", "*/worker-?").
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "model/lock_queue.hpp"
#include "model/wait_for_graph.hpp"

namespace zklock::detector {

enum class Policy { youngest, oldest, fewest_held, most_held, lowest_priority };

std::string_view policy_name(Policy p) noexcept;                       // "youngest", "fewest-held"...
std::optional<Policy> parse_policy(std::string_view name) noexcept;    // the names above
std::vector<std::string> policy_names();

struct PolicyOptions {
  Policy policy = Policy::youngest;
  std::vector<std::string> prefer;      // owner patterns chosen first
  std::vector<std::string> protect;     // owner patterns chosen last
};

// One member of a cycle, as the policy sees it.
struct Candidate {
  std::string owner;
  std::string node;          // its waiting node on the cycle (full path)
  std::int64_t czxid = 0;    // of that node
  int priority = 0;          // of that node
  std::size_t held = 0;      // lock nodes the owner holds anywhere
};

// The members of `cycle`, with facts from `analysis` (unknown facts are 0).
std::vector<Candidate> cycle_candidates(const model::Cycle& cycle, const model::WaitAnalysis& analysis);

// Index into `candidates` of the victim. REQUIRES: candidates non-empty.
std::size_t choose_victim(const std::vector<Candidate>& candidates, const PolicyOptions& options);

// Shell-style glob match ('*' and '?'), whole string.
bool glob_match(std::string_view pattern, std::string_view text) noexcept;

}  // namespace zklock::detector
