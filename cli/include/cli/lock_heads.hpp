// Lock heads that keep others waiting: `zklock doctor`'s "head not taking
// the lock" finding (a failure seen in the field: every client in turn had
// its node at the head of a queue and was not granted, and nothing showed
// it).
//
// A head is the first node of a queue in creation order; it holds. A head
// "keeps others waiting" while at least one node waits behind it. From the
// tree alone a head that uses the lock for a long time and one whose owner
// never notices its grant look the same, so the finding says "held or
// stuck: check the owner"; it is a warning, never a failure.
//
// How long: the model's QueueHead::since_ms() (the later of the head's and
// its first waiter's creation), tightened with the hand-off marker for an
// exclusive head: the lock path's data is written only by a holder's
// release (docs/protocol.md, section 5), and while an exclusive head exists
// only a node ahead of it can hold, so a marker written after the head's
// creation (lock mzxid > head czxid) was written no later than the head
// reached the front. The figure is therefore an upper bound on the time the
// head has been at the front with waiters, exact after an ordinary hand-off.
// A shared head is not tightened: readers behind it hold and write the
// marker too.
//
// Session: a lock node is ephemeral, and ZooKeeper deletes a session's
// ephemerals when it expires the session, so a head that exists has an
// owner session the server has not expired — alive in ZooKeeper's sense.
// Its process may still be frozen or cut off for up to the session
// timeout. A head with no ephemeral owner (a persistent node, written by
// hand or by a foreign client) has no session to expire and is reported
// with session "none".
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "cli/lock_tree.hpp"

namespace zklock::cli {

// The finding's words (stable: tests and operators' scripts match them).
inline constexpr std::string_view kHeadNotTakingTheLock = "head not taking the lock";

struct HeadFinding {
  std::string lock;
  std::string node;     // the head's full path
  std::string name;     // its child name
  std::string owner;    // resolved owner id (the model's rule)
  std::string session;  // "0x..."; "none" for a persistent node
  std::int64_t kept_waiting_ms = 0;  // how long it has had waiters behind it (upper bound, see above)
  bool since_hand_off = false;       // kept_waiting_ms counts from the last hand-off marker
  std::size_t holders = 0, waiters = 0;
};

struct HeadReport {
  std::vector<HeadFinding> findings;  // in lock path order
  std::size_t with_waiters = 0;       // locks whose head has waiters behind it
};

// The heads in `tree` that have kept others waiting for `threshold` or
// longer at `now_ms` (ms since the epoch, on the server's clock when the
// caller has it). Reads the stat of each such lock path (the marker);
// throws Error on anything but NONODE.
HeadReport find_long_heads(Client& client, const TreeView& tree, std::int64_t now_ms,
                           std::chrono::milliseconds threshold);

// "head not taking the lock: NODE of OWNER (session S) has had N waiting
// behind it for AGE: held or stuck, check the owner"
std::string finding_text(const HeadFinding& f);

}  // namespace zklock::cli
