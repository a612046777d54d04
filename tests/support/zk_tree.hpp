// Whole subtrees on the raw C client, pipelined: listing every path under a
// root and deleting a subtree. The benchmark deletes each run's tree with it
// (so the next run does not measure the server's container manager reaping
// the last one's empty lock paths); tests use it to clean up and to check.
//
// Both calls keep at most `depth` requests outstanding on the one session,
// and are bounded by `limit`: past it they stop issuing and return what was
// done (complete = false). Replies that arrive after a call returned find
// its state kept alive by the replies themselves, so a late reply is safe.
//
// Thread-safety: any thread except the handle's completion thread (the
// calls wait for replies that thread delivers).
#pragma once

#include <chrono>
#include <cstddef>
#include <string>
#include <vector>

#include <zookeeper/zookeeper.h>

namespace zklock::test {

struct TreeListing {
  // Every path found, `root` first; each path comes after its parent.
  std::vector<std::string> paths;
  std::vector<std::size_t> depth;  // depth[i]: paths[i]'s levels below root (root: 0)
  bool complete = false;           // every listing answered within the limit
};

// Lists `root` and every path below it (no watches). A path that vanishes
// while being listed is left out; `root` missing gives an empty listing.
TreeListing list_tree(zhandle_t* zh, const std::string& root,
                      std::chrono::milliseconds limit = std::chrono::seconds(60), std::size_t depth = 1000);

struct SubtreeDeleted {
  std::size_t deleted = 0;  // deletes that succeeded
  std::size_t gone = 0;     // already gone (NoNode: an ephemeral of a closed session, a reaped container)
  std::size_t failed = 0;   // any other answer (NotEmpty: a child created meanwhile), or no answer in time
  double seconds = 0;
  bool complete() const { return failed == 0; }
};

// Deletes `root` and every path below it: lists the tree, then deletes it
// level by level, deepest first, each level's deletes pipelined. NoNode is
// not an error. Deletes nothing above `root`.
SubtreeDeleted delete_subtree(zhandle_t* zh, const std::string& root,
                              std::chrono::milliseconds limit = std::chrono::seconds(120), std::size_t depth = 1000);

}  // namespace zklock::test
