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
// All of it is maintained on every insert/update/erase (O(log L + log K + q)
// each, for L lock paths, K owner keys and the q nodes of the queue
// touched), so snapshot() copies only the contended queues and the facts of
// the keys in them. analyze_snapshot() over that snapshot finds exactly the
// waits, cycles and counts analyze_queues() finds over queues()
// (tests/unit/lock_index_test.cpp, lock_index_rebuild_test.cpp).
//
// Memory: a lock path is stored once (the contended set and the per-key
// sets view it), a node's name once (its owner key is a range of it), and
// a lone queue is a one-element vector: about 600 bytes per lock path held
// alone by an owner of its own (bench `detector-scan`).
//
// Thread-safety: a value type; the owner (the Mirror) serialises access.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <string>
#include <string_view>
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
  // that name is already there, or when the node's owner key is not part of
  // its name within its first 255 characters (every name
  // queue_node_from_name() accepts has it at the start).
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
  // A node as the index keeps it: its name, what the name says (the owner
  // key as a range of the name, so it is not stored twice), and what its
  // read gave (empty and 0 until read). A QueueNode is made from it only
  // for a snapshot, that is for the nodes of contended queues.
  struct Slot {
    std::string name;
    std::string owner;
    std::int64_t czxid = 0, ctime_ms = 0, gives_up_after_ms = 0;
    std::int32_t sequence = 0, priority = 0;
    Mode mode = Mode::exclusive;
    std::uint8_t key_at = 0, key_len = 0;  // name.substr(key_at, key_len) is the owner key

    std::string_view key() const noexcept { return std::string_view(name).substr(key_at, key_len); }
    QueueNode node() const;
  };
  // A queue's nodes in no particular order: a vector, since nearly every
  // queue has one node and few have more than a handful.
  using Queue = std::vector<Slot>;
  struct KeyState {
    std::size_t nodes = 0;  // nodes with this key
    // valid owner id from data -> nodes naming it; sorted by id, nearly
    // always one entry (an id hashes to the key) or none (nothing read).
    std::vector<std::pair<std::string, std::size_t>> owners;
    std::set<std::string_view> lone;  // lock paths (views of queues_' keys) whose only node has this key
  };

  static Queue::iterator find(Queue& q, std::string_view name);
  void mark_lone(const std::string& lock, const Queue& q, bool lone);
  void count_owner(const Slot& n, int delta);

  // Invariants: no queue is empty; `contended_` holds exactly the queues
  // with >= 2 nodes; keys_[k].lone holds exactly the queues of size 1 whose
  // node has key k; keys_[k] exists exactly while some node has key k.
  // contended_ and the lone sets view the keys of queues_ and contended_
  // points at its values (std::map nodes do not move), so a lock path is
  // stored once and a snapshot does not look each contended queue up again.
  std::map<std::string, Queue, std::less<>> queues_;  // by lock path
  std::map<std::string_view, const Queue*> contended_;
  struct KeyHash {
    using is_transparent = void;
    std::size_t operator()(std::string_view k) const noexcept { return std::hash<std::string_view>{}(k); }
  };
  std::unordered_map<std::string, KeyState, KeyHash, std::equal_to<>> keys_;
  std::size_t nodes_ = 0;
};

}  // namespace zklock::model
