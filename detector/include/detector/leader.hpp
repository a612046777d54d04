// LeaderElection: one detector acts at a time.
//
// Each replica creates an EPHEMERAL_SEQUENTIAL candidate node
// "<dir>/c_<guid>_<seq>" (data: the detector id). The first candidate in
// creation order leads (model/election_order.hpp: the suffix where it is
// unambiguous, the czxid otherwise); every other candidate watches only its
// immediate predecessor (no herd).
// When the leader's process dies its session expires, its node vanishes, and
// the next candidate leads — within one session timeout.
//
// Leadership is also fenced where it matters: every revocation multi checks
// that the leader node still exists (leader_node()), so a deposed leader
// that has not noticed yet cannot revoke anything.
//
// The GUID is fresh per session and kept across re-entries within one: a
// create whose answer was lost may still commit, and every listing takes the
// earliest candidate carrying our GUID as ours and deletes the others, so no
// orphaned candidate of ours blocks the election. On a new session (after
// expiry) the replica re-enters with a fresh GUID and node. stop() deletes
// the node so a standby takes over at once.
//
// Thread-safety: all methods may be called from any thread except a Client
// callback; `on_change` runs on the completion thread and must be cheap.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <spdlog/logger.h>

#include "zklock/client.hpp"
#include "zklock/protocol/paths.hpp"

namespace zklock::detector {

inline constexpr std::string_view kElectionPath = protocol::kElectionPath;

struct LeaderOptions {
  std::string dir = std::string(kElectionPath);
  std::string id;                          // written into the candidate node
  std::shared_ptr<spdlog::logger> log;     // default: spdlog's default logger
  std::function<void(bool leader)> on_change;
};

class LeaderElection {
 public:
  // REQUIRES: `client` outlives the election.
  LeaderElection(Client& client, LeaderOptions options);
  ~LeaderElection();  // calls stop()
  LeaderElection(const LeaderElection&) = delete;
  LeaderElection& operator=(const LeaderElection&) = delete;

  void start();
  // Leaves the election and deletes our node (waits up to `timeout`).
  void stop(std::chrono::milliseconds timeout = std::chrono::seconds(5));

  // Lists the candidates again (after a failed step, or when a revocation
  // found our node gone); re-enters the election (same GUID) if no node of
  // ours is listed.
  void recheck();

  bool is_leader() const;
  // Our candidate node's full path while we lead.
  std::optional<std::string> leader_node() const;
  // Our candidate node, leading or not.
  std::optional<std::string> candidate_node() const;
  bool wait_leader(std::chrono::milliseconds timeout) const;

  struct Core;

 private:
  std::shared_ptr<Core> core_;
};

}  // namespace zklock::detector
