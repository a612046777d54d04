#include "detector/policy.hpp"

#include <algorithm>
#include <array>
#include <tuple>

namespace zklock::detector {
namespace {

constexpr std::array<std::pair<Policy, std::string_view>, 5> kNames{{
    {Policy::youngest, "youngest"},
    {Policy::oldest, "oldest"},
    {Policy::fewest_held, "fewest-held"},
    {Policy::most_held, "most-held"},
    {Policy::lowest_priority, "lowest-priority"},
}};

bool matches_any(const std::vector<std::string>& patterns, std::string_view owner) {
  return std::any_of(patterns.begin(), patterns.end(),
                     [&](const std::string& p) { return glob_match(p, owner); });
}

// Negative when `a` is the better victim under `policy`, positive when `b`
// is, zero when the policy cannot tell them apart.
int policy_compare(Policy policy, const Candidate& a, const Candidate& b) {
  auto cmp = [](auto x, auto y) { return x < y ? -1 : (y < x ? 1 : 0); };
  switch (policy) {
    case Policy::youngest: return cmp(b.czxid, a.czxid);
    case Policy::oldest: return cmp(a.czxid, b.czxid);
    case Policy::fewest_held: return cmp(a.held, b.held);
    case Policy::most_held: return cmp(b.held, a.held);
    case Policy::lowest_priority: return cmp(a.priority, b.priority);
  }
  return 0;
}

}  // namespace

std::string_view policy_name(Policy p) noexcept {
  for (const auto& [policy, name] : kNames) {
    if (policy == p) return name;
  }
  return "youngest";
}

std::optional<Policy> parse_policy(std::string_view name) noexcept {
  for (const auto& [policy, n] : kNames) {
    if (n == name) return policy;
  }
  return std::nullopt;
}

std::vector<std::string> policy_names() {
  std::vector<std::string> out;
  for (const auto& entry : kNames) out.emplace_back(entry.second);
  return out;
}

bool glob_match(std::string_view pattern, std::string_view text) noexcept {
  // Iterative matcher with one backtrack point for the last '*': linear-ish,
  // no recursion, so hostile patterns cannot blow the stack.
  std::size_t p = 0, t = 0, star = std::string_view::npos, mark = 0;
  while (t < text.size()) {
    if (p < pattern.size() && (pattern[p] == '?' || pattern[p] == text[t])) {
      ++p;
      ++t;
    } else if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      mark = t;
    } else if (star != std::string_view::npos) {
      p = star + 1;
      t = ++mark;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

std::vector<Candidate> cycle_candidates(const model::Cycle& cycle, const model::WaitAnalysis& analysis) {
  std::vector<Candidate> out;
  out.reserve(cycle.waits.size());
  for (const auto& w : cycle.waits) {
    Candidate c;
    c.owner = w.waiter;
    c.node = w.waiter_node;
    if (auto it = analysis.nodes.find(w.waiter_node); it != analysis.nodes.end()) {
      c.czxid = it->second.czxid;
      c.priority = it->second.priority;
    }
    if (auto it = analysis.owners.find(w.waiter); it != analysis.owners.end()) {
      c.held = it->second.held_count();
    }
    out.push_back(std::move(c));
  }
  return out;
}

std::size_t choose_victim(const std::vector<Candidate>& candidates, const PolicyOptions& options) {
  // Rank: (protected last, preferred first, policy, owner id, node path).
  auto better = [&](const Candidate& a, const Candidate& b) {
    const bool pa = matches_any(options.protect, a.owner), pb = matches_any(options.protect, b.owner);
    if (pa != pb) return pb;
    const bool fa = matches_any(options.prefer, a.owner), fb = matches_any(options.prefer, b.owner);
    if (fa != fb) return fa;
    if (const int c = policy_compare(options.policy, a, b); c != 0) return c < 0;
    return std::tie(a.owner, a.node) < std::tie(b.owner, b.node);
  };
  std::size_t best = 0;
  for (std::size_t i = 1; i < candidates.size(); ++i) {
    if (better(candidates[i], candidates[best])) best = i;
  }
  return best;
}

}  // namespace zklock::detector
