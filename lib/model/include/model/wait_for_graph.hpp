// WaitForGraph: who waits for whom, and the cycles that never end.
//
// Vertices are owners (owner ids, as recorded in lock node data); an edge
// "waiter -> blocker" says that one of waiter's nodes queues behind one of
// blocker's nodes on some lock and must wait for it. Each edge carries the
// evidence: the lock path, both node paths, and whether the blocker holds the
// lock (hard) or is itself still waiting ahead in the queue (soft: a reader
// stuck behind a waiting writer waits for that writer).
//
// cycles() runs Boost's strong_components and reports, for every component
// that can never make progress (two or more owners, or one owner with a
// self-loop), one concrete shortest cycle  owner -> lock -> owner -> ...  made
// of real edges. Breaking that cycle may leave a smaller one inside the same
// component; the next scan finds it.
//
// Domain ids go in and come out; Boost descriptors never leave this class.
// Results are deterministic for a given set of edges, whatever the insertion
// order (replicas and the CLI agree).
//
// Thread-safety: a value type; const methods may run concurrently.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "zklock/protocol/revocation.hpp"

namespace zklock::model {

enum class EdgeKind { hard, soft };
std::string_view edge_kind_name(EdgeKind k) noexcept;  // "hard" / "soft"

// One wait: `waiter` waits for `blocker` on `lock`.
struct Wait {
  std::string waiter;        // owner id
  std::string blocker;       // owner id
  std::string lock;          // lock path
  std::string waiter_node;   // full path of the waiting node
  std::string blocker_node;  // full path of the node it queues behind
  EdgeKind kind = EdgeKind::hard;

  friend bool operator==(const Wait&, const Wait&) = default;
};

// A cycle of waits: waits[i].blocker == waits[(i + 1) % size].waiter. A
// self-loop is a cycle of one wait. Starts at the smallest owner id.
struct Cycle {
  std::vector<Wait> waits;

  std::vector<std::string> owners() const;
  // Every node path that forms the cycle (waiting and blocking), sorted,
  // without duplicates: the nodes that must all still exist for the cycle to persist.
  std::vector<std::string> node_paths() const;

  friend bool operator==(const Cycle&, const Cycle&) = default;
};

// "a -[/locks/y]-> b -[/locks/x]-> a" (soft edges are marked "~[...]~>").
std::string cycle_text(const Cycle& cycle);

class WaitForGraph {
 public:
  // Adds one wait. Adding the same wait twice has no effect.
  void add_wait(const Wait& wait);

  std::size_t owner_count() const noexcept { return names_.size(); }
  std::size_t wait_count() const noexcept { return edges_.size(); }
  // Owner ids in sorted order (owners appear through waits only).
  std::vector<std::string> owners() const;
  // Every wait, sorted by (waiter, blocker, lock, waiter_node, blocker_node).
  std::vector<Wait> waits() const;

  // One concrete cycle per deadlocked component, sorted by first owner.
  std::vector<Cycle> cycles() const;

 private:
  struct Edge {
    std::size_t waiter, blocker;  // vertex ids (indices into names_)
    Wait wait;
  };
  std::size_t vertex(const std::string& owner);
  std::vector<std::size_t> sorted_edges() const;

  std::vector<std::string> names_;                        // vertex id -> owner id
  std::unordered_map<std::string, std::size_t> ids_;      // owner id -> vertex id
  std::vector<Edge> edges_;
  std::unordered_map<std::string, std::size_t> edge_keys_;  // dedup
};

// The one JSON rendering of waits and cycles (`zklock cycles --json`,
// `zklock graph --json`; docs/cli.md):
//   wait:  {"waiter","blocker","lock","waiter_node","blocker_node","kind":"hard"|"soft"}
//   cycle: {"text": cycle_text(), "owners": [...], "waits": [wait, ...]}
nlohmann::json wait_json(const Wait& wait);
nlohmann::json cycle_json(const Cycle& cycle);
// The one JSON rendering of a revocation record (`zklock revocations --json`
// and the detector's /api/state; docs/cli.md), `path` being the record's node:
//   {"record","victim_node","victim_owner","victim_token","cycle":[{"owner","lock","node"}],
//    "cycle_text","policy","mode","by","time_ms","reason"}
nlohmann::json revocation_json(const std::string& path, const protocol::RevocationRecord& record);

}  // namespace zklock::model
