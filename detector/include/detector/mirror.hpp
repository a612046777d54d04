// Mirror: an in-memory copy of the lock tree under a root, kept current by
// child watches.
//
// Every znode under the root that is not a zklock lock node is a directory
// (a lock path, or a plain parent of lock paths at any depth) and carries one
// child watch. When a watch fires only that directory is listed again and
// diffed: vanished lock nodes are dropped, new directories are listed,
// vanished ones are forgotten with their subtree, and a new lock node enters
// the index from its name alone (`<mode>_<ownerkey>_<guid>_<seq>`: mode,
// owner key, sequence). snapshot() reads memory only: a scan costs no
// ZooKeeper operation while nothing changes.
//
// A lock node's data and stat (owner id, priority, czxid, ctime) are read
// only while its queue has two or more nodes, once (the data never changes):
// a node alone in its queue holds and nobody waits for it, so no wait, cycle
// or age depends on its read fields. A listing that brings a queue to two
// or more nodes reads every node of it not read yet, so a lock path held
// alone costs one list (with its watch) and nothing else. An unread lone
// node has no czxid (lone_nodes() reports 0; revoke() reads each victim's
// stat itself before its multi) and names no owner id: its key's owner is
// resolved from the key's read nodes, which include every node in a
// contended queue (model/lock_index.hpp).
//
// The nodes live in a LockIndex updated by the same watch-driven diffs, so
// snapshot() copies only the queues with two or more nodes (the only ones
// that can hold a wait) plus per-owner-key summaries of the rest: a scan
// costs in proportion to contended queues, not to held locks.
//
// resync() re-lists every directory (a safety net; it arms no second watch
// where one is armed).
//
// Watches are spread over sessions. On reconnect the 3.8 C client re-arms
// every watch of a session in one SetWatches packet, and the server closes
// a connection whose packet exceeds its jute.maxbuffer: a session watching
// too many paths never reconnects. So each directory is assigned, when the
// mirror first meets it, to the least-filled session whose watched bytes
// (4 + length of chroot + path per watch, as in SetWatches) stay within the
// Client's ClientOptions::watch_budget_bytes; the mirror opens further
// Clients with the same options (on a background thread): load_sessions - 1
// at start(), which waits for them (bounded by the connect timeout) before
// the load, and one more whenever every session is full. A directory's
// listing, watch and node reads all stay on its session while that session
// lives, so each watch is accounted to the one session that set it. A session that is replaced
// after expiry has lost its watches: the mirror re-lists that session's
// directories only (the others are untouched). A reconnect of the same
// session needs little: the C client re-arms the watches that were set, and
// the mirror lists again only the directories whose list or node read
// failed with the lost connection (their watch was never set).
//
// Bad input is logged and skipped, never fatal: foreign child names are
// treated as directories (up to max_depth); lock nodes with malformed or
// oversized data stay in their queue (they still block) with an owner taken
// from the owner key in their name; directories with more than max_children
// children, or without READ permission, are skipped until the next resync.
//
// Reads are bounded: at most max_inflight operations are outstanding, over
// all sessions; the rest wait in a queue (a first sync of a large tree, or
// a replaced session's re-list, does not flood the connections).
// MirrorStats::load_seconds times a load: from start(), or from a replaced
// session's re-list, until the mirror is next idle.
//
// Thread-safety: all methods, the destructor included, may be called from
// any thread except a Client callback. Client callbacks only update memory
// and issue further async reads; the listener `on_node_added` runs on a
// completion thread and must be cheap.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/logger.h>

#include "model/lock_index.hpp"
#include "model/lock_queue.hpp"
#include "zklock/client.hpp"

namespace zklock::detector {

struct MirrorOptions {
  std::string root = "/locks";
  std::size_t max_children = 100'000;  // larger directories are skipped
  std::size_t max_depth = 32;          // directories deeper below the root are skipped
  std::size_t max_inflight = 256;
  // Sessions the mirror watches through from the start (at least 1: the
  // Client it is given). A new directory goes to the least-filled session
  // with room, so a load's listings are spread over this many sessions and
  // the server runs them in parallel (it runs one session's requests in
  // order, on one worker thread). Beyond the watch budget more are opened.
  std::size_t load_sessions = 1;
  std::shared_ptr<spdlog::logger> log;  // default: spdlog's default logger
  // Called when a lock node's stat arrives (nodes of contended queues
  // only): (lock path, node ctime in ms).
  std::function<void(const std::string& lock, std::int64_t ctime_ms)> on_node_added;
};

struct MirrorStats {
  std::size_t dirs = 0;            // directories mirrored (root included)
  std::size_t nodes = 0;           // lock nodes mirrored
  std::size_t pending = 0;         // reads queued or in flight
  std::uint64_t ops_issued = 0;    // ZooKeeper reads since start
  std::uint64_t resyncs = 0;       // re-lists: periodic full ones, and one per replaced session
  std::uint64_t skipped_dirs = 0;  // directories skipped (oversized, NOAUTH, too deep)
  std::uint64_t bad_data = 0;      // lock nodes whose data did not decode
  // Seconds from start() (or the last new session's re-mirror) until the
  // mirror was first idle after it; 0 until then.
  double load_seconds = 0;
  // Budgeted watch bytes of each session the mirror uses ([0]: the Client
  // it was given): directories assigned to it plus watches of forgotten
  // directories that have not fired yet.
  std::vector<std::size_t> session_watch_bytes;
  std::size_t max_session_watch_bytes() const {
    std::size_t m = 0;
    for (auto b : session_watch_bytes) m = b > m ? b : m;
    return m;
  }
};

class Mirror {
 public:
  // REQUIRES: `client` outlives the Mirror. Nothing is read before start().
  Mirror(Client& client, MirrorOptions options);
  // Closes the sessions the mirror opened (after waiting, bounded by the
  // connect timeout, for one being opened).
  ~Mirror();
  Mirror(const Mirror&) = delete;
  Mirror& operator=(const Mirror&) = delete;

  void start();
  void resync();

  // The contended queues and the summary of the others, at one instant
  // (feed it to analyze_snapshot()).
  model::QueueSnapshot snapshot() const;
  // Every lock queue (lock paths with at least one zklock node). O(all
  // nodes): for tools and tests, not for scans.
  std::vector<model::LockQueue> queues() const;
  // The nodes an owner key holds alone in their queues, now (czxid 0 for
  // a node not read: see above).
  std::vector<model::LoneNode> lone_nodes(const std::string& owner_key) const;
  MirrorStats stats() const;
  // True when no read is queued or in flight (the copy is as current as the
  // watches make it).
  bool idle() const;
  bool wait_idle(std::chrono::milliseconds timeout) const;

  struct Core;  // shared with in-flight callbacks

 private:
  std::shared_ptr<Core> core_;
  std::thread opener_;  // opens sessions when every open one is full
};

}  // namespace zklock::detector
