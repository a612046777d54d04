// A multi for the C client (multi_request.hpp: why zoo_amulti is never called when it would fail).
#include "multi_request.hpp"

#include <cstdlib>
#include <cstring>
#include <new>

namespace zklock {

int to_zoo_mode(CreateMode m) {
  switch (m) {
    case CreateMode::persistent: return ZOO_PERSISTENT;
    case CreateMode::ephemeral: return ZOO_EPHEMERAL;
    case CreateMode::persistent_sequential: return ZOO_PERSISTENT_SEQUENTIAL;
    case CreateMode::ephemeral_sequential: return ZOO_EPHEMERAL_SEQUENTIAL;
    case CreateMode::container: return ZOO_CONTAINER;
  }
  return ZOO_PERSISTENT;
}

bool c_client_accepts_path(const char* path, int zoo_flags) {
  // ZOOKEEPER_IS_SEQUENCE: modes 2, 3 and 6, exactly those with the ZOO_SEQUENCE bit (2).
  const bool sequential = (zoo_flags & ZOO_SEQUENCE) != 0;
  if (path == nullptr || path[0] != '/') return false;
  const std::size_t len = std::strlen(path);
  if (len == 1) return true;  // the root
  if (path[len - 1] == '/' && !sequential) return false;
  std::size_t start = 1;  // of the current component
  for (std::size_t i = 1; i <= len; ++i) {
    if (i < len && path[i] != '/') {
      const auto c = static_cast<signed char>(path[i]);  // as the C client compares a plain char
      if (c > 0x00 && c < 0x1f) return false;
      continue;
    }
    const std::size_t n = i - start;
    const bool last = i == len;
    if (n == 0 && !last) return false;  // "//"
    const bool dots = (n == 1 && path[start] == '.') || (n == 2 && path[start] == '.' && path[start + 1] == '.');
    if (dots && !(last && sequential)) return false;
    start = i + 1;
  }
  return true;
}

MultiRequest::MultiRequest(std::vector<Op> requested, const ACL_vector* acl) : ops(std::move(requested)) {
  const auto n = ops.size();
  zops.resize(n);
  results.resize(n);
  path_buffers.resize(n);
  c_paths.reserve(n);
  for (std::size_t i = 0; i < n; ++i) {
    const Op& op = ops[i];
    c_paths.emplace_back(::strdup(op.path.c_str()));
    const char* path = c_paths.back().get();
    if (path == nullptr) throw std::bad_alloc();
    switch (op.kind) {
      case Op::Kind::create:
        zoo_create_op_init(&zops[i], path, op.data.data(), static_cast<int>(op.data.size()), acl,
                           to_zoo_mode(op.mode), path_buffers[i].data(), static_cast<int>(path_buffers[i].size()));
        break;
      case Op::Kind::remove: zoo_delete_op_init(&zops[i], path, op.version); break;
      case Op::Kind::set_data:
        zoo_set_op_init(&zops[i], path, op.data.data(), static_cast<int>(op.data.size()), op.version, nullptr);
        break;
      case Op::Kind::check: zoo_check_op_init(&zops[i], path, op.version); break;
    }
  }
}

MultiRequest::~MultiRequest() {
  if (!c_paths_given_up) return;
  for (auto& p : c_paths) (void)p.release();  // zoo_amulti may have freed one: leak them all rather than free one twice
}

std::vector<OpResult> MultiRequest::outcome() const {
  std::vector<OpResult> out(ops.size());
  for (std::size_t i = 0; i < out.size(); ++i) {
    out[i].status = Status{results[i].err};
    if (ops[i].kind == Op::Kind::create && results[i].err == ZOK) out[i].created_path = path_buffers[i].data();
  }
  return out;
}

MultiRequest::Call MultiRequest::call() {
  Call c{static_cast<int>(zops.size()), zops.data(), results.data(), true, &c_paths_given_up};
  for (std::size_t i = 0; i < ops.size() && c.paths_accepted; ++i) {
    const int flags = ops[i].kind == Op::Kind::create ? to_zoo_mode(ops[i].mode) : 0;
    c.paths_accepted = c_client_accepts_path(c_paths[i].get(), flags);
  }
  return c;
}

int issue_multi(zhandle_t* zh, const MultiRequest::Call& call, void_completion_t done, const void* data) {
  if (!call.paths_accepted) return ZBADARGUMENTS;
  const int state = zoo_state(zh);
  if (state == ZOO_EXPIRED_SESSION_STATE || state == ZOO_AUTH_FAILED_STATE) return ZINVALIDSTATE;
  const int rc = zoo_amulti(zh, call.count, call.zops, call.results, done, data);
  // Not ZOK: nothing completes the request, so it is still ours to touch.
  if (rc != ZOK) *call.given_up = true;
  return rc;
}

}  // namespace zklock
