// A multi for the C client, and the one way it is handed to zoo_amulti.
//
// zoo_amulti (3.8.0, and unchanged in the C client's current source) frees
// memory it does not own when it cannot prepare a sub-request. Each
// sub-request's path goes through Request_path_init, which fails with
// ZBADARGUMENTS for a path isValidPath rejects and with ZINVALIDSTATE once the
// handle is unrecoverable (session expired, authentication failed). From then
// on every later sub-request skips its init but still passes its request's
// `path` field, never set, to free_duplicate_path, which frees it unless it
// equals the sub-request's own path. In Debian's build that field holds the
// failed sub-request's path pointer: zoo_amulti frees the caller's string,
// and the caller frees it again (a holder frozen past its session, removing
// its node with the marker's two-op multi on the expired handle when its
// bound lapsed, aborted this way).
//
// So issue_multi() never calls zoo_amulti when a sub-request would fail its
// init — a path the C client rejects, or an unrecoverable handle — and hands
// it paths of its own (malloc'd copies) that it gives up, rather than frees,
// whenever zoo_amulti refuses the request. What is left is a state change in
// the call itself (the I/O thread reading an "expired" answer to a reconnect
// while zoo_amulti runs: microseconds, unless the caller is preempted inside
// it). Without a chroot, a multi of two sub-requests is safe even then (the
// copy zoo_amulti frees is never freed again); one of three or more, or any
// with a chroot (whose prepended path Request_path_init frees before
// zoo_amulti frees it again), may still free a pointer twice inside the C
// client (docs/design.md).
#pragma once

#include <zookeeper/zookeeper.h>

#include <array>
#include <cstdlib>
#include <memory>
#include <vector>

#include "zklock/client.hpp"

namespace zklock {

int to_zoo_mode(CreateMode m);

// Whether the C client's isValidPath accepts `path` for a request with
// `zoo_flags` (a create's mode; 0 for the others): absolute, no empty
// component, no "." or ".." component and no trailing '/' (both allowed last
// in a sequential create's path), no byte 0x01..0x1e.
bool c_client_accepts_path(const char* path, int zoo_flags);

// A multi's request and result arrays, which must live until its completion.
// Built whole before the request is tracked (OpBase::published); held through
// a unique_ptr, so the C structs' pointers into it never move.
struct MultiRequest {
  MultiRequest(std::vector<Op> requested, const ACL_vector* acl);
  ~MultiRequest();
  MultiRequest(const MultiRequest&) = delete;
  MultiRequest& operator=(const MultiRequest&) = delete;

  std::vector<OpResult> outcome() const;

  // What issue_multi() needs, taken before the request is tracked: from then
  // on the completion may free the request, so the issuing thread reads
  // nothing of it (OpBase::published); zoo_amulti reads the arrays.
  struct Call {
    int count = 0;
    zoo_op_t* zops = nullptr;
    zoo_op_result_t* results = nullptr;
    bool paths_accepted = false;  // every path passes c_client_accepts_path
    bool* given_up = nullptr;     // &c_paths_given_up, set only when refused
  };
  Call call();

  std::vector<Op> ops;
  std::vector<zoo_op_t> zops;
  std::vector<zoo_op_result_t> results;
  std::vector<std::array<char, 1024>> path_buffers;
  // The paths zops point to: malloc'd copies of ops[i].path, freed with the
  // request unless zoo_amulti refused it (see above).
  struct FreeChars {
    void operator()(char* p) const noexcept { std::free(p); }
  };
  std::vector<std::unique_ptr<char, FreeChars>> c_paths;
  bool c_paths_given_up = false;
};

// zoo_amulti(zh, the request) with `done(rc, data)` as its completion, or,
// without calling it, ZBADARGUMENTS for a path the C client would reject and
// ZINVALIDSTATE for an unrecoverable handle. Non-ZOK: the request is still
// the caller's, and nothing completes it.
int issue_multi(zhandle_t* zh, const MultiRequest::Call& call, void_completion_t done, const void* data);

}  // namespace zklock
