// LockIndex: the detector's lock queues, kept so that a scan costs in
// proportion to the queues that can hold a wait, not to every held lock.
//
// A queue with one node cannot produce a wait-for edge: its node holds (an
// exclusive node at the head holds; a shared node with no writer ahead
// holds) and nothing queues behind it. So the index keeps, besides every
// node, the set of "contended" queues (two or more nodes) and, per owner
// key, the facts a scan needs about that key's nodes in lone queues:
//
//   - the owner id (the smallest valid owner named by any node with the key,
//     as analyze_queues() resolves it), because a waiting node with bad data
//     is named after its key's other nodes. A node not read yet (the
//     detector's mirror reads a node only while its queue is contended)
//     names no owner; since the key is a hash of the owner id, a key's read
//     nodes name the same owner as its unread ones would;
//   - which lone queues the key holds, because victim policies count every
//     node an owner holds and `--mode all` deletes them.
//
// All of it is maintained on every insert/update/erase (O(log n) each), so
// snapshot() copies only the contended queues and the facts of the keys in
// them. analyze_snapshot() over that snapshot finds exactly the waits, cycles
// and counts analyze_queues() finds over queues() (tests/unit/lock_index_test.cpp).
//
// Thread-safety: a value type; the owner (the Mirror) serialises access.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "model/lock_queue.hpp"

namespace zklock::model {

// A lock node held alone in its queue.
struct LoneNode {
  std::string path;
  std::int64_t czxid = 0;  // 0 while the node has not been read
};

class LockIndex {
 public:
  // Adds `node` to the queue of `lock`; false (and no change) when a node of
  // that name is already there.
  bool insert(const std::string& lock, QueueNode node);
  // The node's read completed: its stat, and the owner, priority and stated
  // timeout from its data (owner empty and timeout 0 when the data did not
  // decode). No effect when absent.
  void set_read(const std::string& lock, const std::string& name, std::int64_t czxid, std::int64_t ctime_ms,
                std::string owner, int priority, std::int64_t gives_up_after_ms = 0);
  // No effect when absent.
  void erase(const std::string& lock, const std::string& name);

  std::size_t node_count() const noexcept { return nodes_; }
  std::size_t queue_count() const noexcept { return queues_.size(); }

  QueueSnapshot snapshot() const;
  // The nodes `owner_key`'s owner holds alone in their queues, by path.
  std::vector<LoneNode> lone_nodes(const std::string& owner_key) const;
  // Every queue (O(all nodes): for tools and tests, not for scans).
  std::vector<LockQueue> queues() const;

 private:
  struct KeyState {
    std::size_t nodes = 0;                      // nodes with this key
    std::map<std::string, std::size_t> owners;  // valid owner id from data -> nodes naming it
    std::set<std::string> lone;                 // lock paths whose only node has this key
  };
  using Queue = std::map<std::string, QueueNode>;  // by child name

  void mark_lone(const std::string& lock, const Queue& q, bool lone);
  void count_owner(const QueueNode& n, int delta);

  // Invariants: no queue is empty; `contended_` holds exactly the queues
  // with >= 2 nodes; keys_[k].lone holds exactly the queues of size 1 whose
  // node has key k; keys_[k] exists exactly while some node has key k.
  // contended_ points into queues_ (std::map nodes do not move), so a
  // snapshot does not look each contended queue up by its long path again.
  std::map<std::string, Queue> queues_;  // by lock path
  std::map<std::string, const Queue*> contended_;
  std::unordered_map<std::string, KeyState> keys_;
  std::size_t nodes_ = 0;
};

}  // namespace zklock::model
