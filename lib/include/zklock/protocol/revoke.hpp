// Revocation: deleting someone else's lock node, atomically and on record.
//
// Protocol module (zklock/protocol/): for zklock's own tools (detector, CLI)
// and for clients in other languages, not for applications, whose API is
// the headers directly in zklock/.
//
// The deadlock detector (and an operator, through `zklock revoke`) breaks a
// wait by deleting a lock node. The deletion and its explanation are one
// ZooKeeper multi:
//
//   check  <leader node>            optional: a deposed detector cannot revoke
//   check  <every node of the cycle> they must all still exist
//   create /zklock/revocations/<name of each deleted node>   the record (JSON)
//   delete <each victim node>
//
// If any checked node is gone, the multi fails and nothing happens: the
// cycle changed since the snapshot (it may have dissolved on its own). A
// wait relation depends only on both nodes existing (queue order never
// changes), so "all cycle nodes still exist" means "the cycle still exists":
// no false revocation, and no second victim for the same cycle, because the
// first victim's node is gone and fails the second attempt's checks.
//
// The records themselves (their path and JSON codec):
// zklock/protocol/revocation.hpp.
//
// Thread-safety: free functions; the Client rules apply (never call the
// synchronous ones from a Client callback).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "zklock/client.hpp"
#include "zklock/protocol/revocation.hpp"

namespace zklock::protocol {

struct RevocationTarget {
  std::string node;          // full path of a node to delete
  std::string owner;         // its owner id
  // The node's czxid, for the record's token: every grant of the node
  // (a retained node's re-takes too) carries it. 0 if unknown.
  // revoke_async() reads it, with `version`, just before the multi.
  std::int64_t token_zxid = 0;
  int version = -1;          // the delete's expected version (-1: any)
};

struct RevocationRequest {
  std::vector<RevocationTarget> victims;    // deleted; one record each
  std::vector<std::string> checks;          // must all still exist (the cycle's nodes)
  std::optional<std::string> leader_node;   // must still exist (detector leadership)
  RevocationRecord record;                  // victim_* fields are filled per target
};

enum class RevokeOutcome {
  revoked,  // every victim deleted, every record written
  aborted,  // a checked or victim node is gone (the cycle changed): nothing done
  deposed,  // the leader node is gone: nothing done
  failed,   // any other error (connection loss, NOAUTH...): nothing done, or unknown on connection loss
};
std::string_view revoke_outcome_name(RevokeOutcome o) noexcept;

struct RevokeResult {
  RevokeOutcome outcome = RevokeOutcome::failed;
  Status status;              // the failing operation's status (ok when revoked)
  std::string detail;         // which operation failed and why
  std::vector<std::string> records;  // record paths written (when revoked)
};

// The multi's operations, in order (checks, creates, deletes). Pure.
std::vector<Op> revocation_ops(const RevocationRequest& request, std::string_view ensemble_id);

// Interprets a multi's per-operation results for `request`. Pure.
RevokeResult interpret_revocation(const RevocationRequest& request, Status status,
                                  const std::vector<OpResult>& results);

// Runs the revocation: reads the ensemble id and each victim's stat (its
// token and version: a victim re-taken after that read fails the multi's
// versioned delete, `aborted`, rather than being revoked under a stale
// token), runs the multi, and when the records' parent is missing creates
// it and retries once. `done` runs once
// on the completion thread.
void revoke_async(Client& client, RevocationRequest request, std::function<void(RevokeResult)> done);
// Synchronous form. If no answer comes within `timeout` the result is
// `failed` with a detail saying so (the outcome is then unknown).
RevokeResult revoke(Client& client, const RevocationRequest& request,
                    std::chrono::milliseconds timeout = std::chrono::seconds(10));

// Reads the record for a node path (nullopt: none, or unreadable/malformed).
// Throws Error on connection problems.
std::optional<RevocationRecord> read_revocation_record(Client& client, std::string_view node_path);

// Keeps the newest `keep` records (by czxid), deletes the rest. Returns how
// many were deleted. Throws Error on connection problems.
std::size_t prune_revocation_records(Client& client, std::size_t keep);

}  // namespace zklock::protocol
