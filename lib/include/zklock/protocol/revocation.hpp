// Revocation records: the on-ZooKeeper record of a deleted lock node, and its JSON codec.
//
// Protocol module (zklock/protocol/): for zklock's own tools (detector, CLI)
// and for clients in other languages, not for applications, whose API is
// the headers directly in zklock/.
//
// At /zklock/revocations/<name of the deleted node>; zklock/protocol/revoke.hpp
// holds the operations that write and read them.
//
// Record names are the deleted nodes' names, which are unique (they carry a
// GUID), so the owner of a vanished node finds out why with a single read
// of revocation_record_path(its node). Records are persistent; the detector's
// leader keeps the newest N (prune_revocation_records).
//
// Record JSON (docs/protocol.md is normative):
//   {"version":1,"victim_node":"/locks/x/w_..._0000000007","victim_owner":"host/12/3",
//    "victim_token":"<ensemble-id>:<zxid of its latest grant>",
//    "cycle":[{"owner":"A","lock":"/locks/y","node":"/locks/y/w_..."}, ...],
//    "policy":"youngest","mode":"wait","detector":"host/99","time":1700000000123,
//    "reason":"..."}
// cycle[i] says: cycle[i].owner waits on cycle[i].lock with cycle[i].node for
// cycle[i+1].owner (the last waits for the first). "time" is milliseconds
// since the Unix epoch. "reason" is free text (operator revocations); the
// cycle is empty for those.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zklock/protocol/paths.hpp"

namespace zklock::protocol {

inline constexpr std::size_t kMaxRevocationRecordBytes = 64 * 1024;

struct RevocationCycleEntry {
  std::string owner;
  std::string lock;
  std::string node;  // full path of the owner's waiting node on `lock`

  friend bool operator==(const RevocationCycleEntry&, const RevocationCycleEntry&) = default;
};

struct RevocationRecord {
  int version = 1;
  std::string victim_node;   // full path of the deleted node
  std::string victim_owner;  // owner id (or "owner-key:<hex>" when unknown)
  std::string victim_token;  // FencingToken text of the deleted node; empty if unknown
  std::vector<RevocationCycleEntry> cycle;
  std::string policy;        // "youngest", ... or "operator"
  std::string mode;          // "wait" or "all"
  std::string detector;      // who revoked: detector id, or the operator tool
  std::int64_t time_ms = 0;  // when, ms since the Unix epoch
  std::string reason;        // optional free text

  friend bool operator==(const RevocationRecord&, const RevocationRecord&) = default;
};

// Compact JSON. Throws Error(invalid_argument) past kMaxRevocationRecordBytes.
std::string encode_revocation_record(const RevocationRecord& record);
// nullopt for malformed or oversized input (never throws).
std::optional<RevocationRecord> decode_revocation_record(std::string_view bytes) noexcept;

// "A -[/locks/y]-> B -[/locks/x]-> A"; empty when the record has no cycle.
std::string cycle_text(const RevocationRecord& record);
// One line for the victim's error message and logs, e.g. "revoked by
// deadlock detector host/99 (policy youngest, mode wait) to break the cycle
// A -[/locks/y]-> B -[/locks/x]-> A" or "... by zklock-cli@h: <reason>".
std::string revocation_message(const RevocationRecord& record);

// "/zklock/revocations/<name>" for a node path or bare node name.
std::string revocation_record_path(std::string_view node_path_or_name);

}  // namespace zklock::protocol
