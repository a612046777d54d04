// Queue order: the one place that decides the order of a lock's nodes and
// who waits for whom. The recipe (lib/src/lock_machine_acquire.cpp), the detector's
// wait-for model (lib/model/lock_queue.cpp), its leader election and the CLI
// all call these functions; nothing restates them. Pure: no I/O, no clocks.
// docs/design.md ("Creation order") gives the argument; docs/protocol.md
// the rule for clients in other languages.
//
// The rule: creation order is czxid order, in every regime. The sequence
// suffix stands in for the czxid only where it cannot disagree with it:
//  - below kAmbiguousFrom the counter counts one per create on the parent,
//    so a larger suffix was created later;
//  - in the last 2^20 values before the counter's end and below zero it
//    does not: ZooKeeper 3.8.0 takes a child's suffix from the parent's
//    latest *pending* change, so at a saturated counter a create that
//    overlaps another in the server's pipeline gets 2147483647+1 (wrapped to
//    -2147483648, then -2147483647, ...) while the next lone create gets
//    2147483647 again, with a larger czxid; a counter that wraps gives
//    negative suffixes to later nodes.
// So a queue is ordered by suffix only when every suffix in it is below
// kAmbiguousFrom, non-negative and distinct; otherwise every node of it is
// ordered by czxid. (That the suffix agrees with the czxid below
// kAmbiguousFrom needs the live nodes of one queue to span fewer than 2^20
// creates on the parent once the counter nears its end; a queue that old
// is ordered by czxid anyway as soon as one of its suffixes is ambiguous.)
//
// Grant rule: an exclusive node waits for every earlier node, a shared node
// for every earlier exclusive node. A node holds when nothing earlier
// blocks it.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "zklock/protocol/node_name.hpp"

namespace zklock::model {

// Suffixes at or above this (and negative ones) may disagree with creation
// order: the last 2^20 values of the signed 32-bit counter.
inline constexpr std::int32_t kAmbiguousFrom = INT32_MAX - (1 << 20) + 1;

constexpr bool ambiguous_sequence(std::int32_t seq) noexcept { return seq < 0 || seq >= kAmbiguousFrom; }

// What ordering needs of one node. czxid 0 means "not known yet".
struct OrderKey {
  std::int32_t sequence = 0;
  std::int64_t czxid = 0;
  std::string_view name;  // last resort among unknown czxids: determinism only
};

// True when this queue can be ordered by suffix alone: every suffix
// unambiguous and no two equal. `keys` in any order.
inline bool suffix_order_suffices(std::vector<std::int32_t> seqs) {
  for (auto s : seqs) {
    if (ambiguous_sequence(s)) return false;
  }
  std::sort(seqs.begin(), seqs.end());
  return std::adjacent_find(seqs.begin(), seqs.end()) == seqs.end();
}

// Sorts `queue` into creation order. `key(e)` returns the OrderKey of an
// element. In the czxid regime a node whose czxid is unknown sorts after
// every known one (never first: it must not pass for a holder ahead of
// nodes it may have been created after), then by name. Returns true when
// the order is exact: suffixes sufficed, or every czxid was known.
template <class T, class KeyFn>
bool sort_by_creation(std::vector<T>& queue, KeyFn key) {
  std::vector<std::int32_t> seqs;
  seqs.reserve(queue.size());
  for (const auto& e : queue) seqs.push_back(key(e).sequence);
  if (suffix_order_suffices(std::move(seqs))) {
    std::sort(queue.begin(), queue.end(),
              [&](const T& a, const T& b) { return key(a).sequence < key(b).sequence; });
    return true;
  }
  bool exact = true;
  for (const auto& e : queue) exact = exact && key(e).czxid != 0;
  std::sort(queue.begin(), queue.end(), [&](const T& a, const T& b) {
    const OrderKey ka = key(a), kb = key(b);
    const bool ua = ka.czxid == 0, ub = kb.czxid == 0;
    if (ua != ub) return ub;  // known before unknown
    if (!ua && ka.czxid != kb.czxid) return ka.czxid < kb.czxid;
    return ka.name < kb.name;
  });
  return exact;
}

// Indices of the elements whose czxid ordering needs and does not have:
// empty when suffixes suffice.
template <class T, class KeyFn>
std::vector<std::size_t> czxids_needed(const std::vector<T>& queue, KeyFn key) {
  std::vector<std::int32_t> seqs;
  seqs.reserve(queue.size());
  for (const auto& e : queue) seqs.push_back(key(e).sequence);
  std::vector<std::size_t> out;
  if (suffix_order_suffices(std::move(seqs))) return out;
  for (std::size_t i = 0; i < queue.size(); ++i) {
    if (key(queue[i]).czxid == 0) out.push_back(i);
  }
  return out;
}

// The grant rule: must a node of mode `waiter` wait for an earlier node of
// mode `earlier`?
constexpr bool blocks(Mode waiter, Mode earlier) noexcept {
  return waiter == Mode::exclusive || earlier == Mode::exclusive;
}

// In a queue in creation order: the index of the nearest earlier node that
// blocks node `i`, or nullopt when node `i` holds. `mode(e)` gives an
// element's Mode.
template <class T, class ModeFn>
std::optional<std::size_t> nearest_blocker(const std::vector<T>& queue, std::size_t i, ModeFn mode) {
  for (std::size_t j = i; j-- > 0;) {
    if (blocks(mode(queue[i]), mode(queue[j]))) return j;
  }
  return std::nullopt;
}

// Holds-flags for a whole queue in creation order, in one pass: node i holds
// when no earlier node blocks it. Holders form a prefix (readers up to the
// first writer, or the first writer alone).
template <class T, class ModeFn>
std::vector<bool> holders(const std::vector<T>& queue, ModeFn mode) {
  std::vector<bool> out(queue.size(), false);
  bool seen_exclusive = false, seen_shared = false;
  for (std::size_t i = 0; i < queue.size(); ++i) {
    const Mode m = mode(queue[i]);
    out[i] = !(seen_exclusive && blocks(m, Mode::exclusive)) && !(seen_shared && blocks(m, Mode::shared));
    (m == Mode::exclusive ? seen_exclusive : seen_shared) = true;
  }
  return out;
}

}  // namespace zklock::model
