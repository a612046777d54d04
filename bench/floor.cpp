#include "floor.hpp"

#include <algorithm>
#include <condition_variable>
#include <stdexcept>
#include <thread>
#include <vector>

namespace zklock::bench {

struct FloorSession::Context {
  FloorSession* session = nullptr;
  // Blocking waits: set by the watch, awaited by the acquiring thread.
  std::mutex mu;
  std::condition_variable cv;
  bool fired = false;  // GUARDED_BY(mu)
  // Async attempts (completion thread only).
  std::string lock;
  std::string node;         // our node's full path once created
  std::string waiting_for;  // the predecessor we watch
  std::function<void(int, const std::string&)> granted;
  std::function<void(int)> release_done;
};

namespace {

std::runtime_error zk_error(const std::string& what, int rc) {
  return std::runtime_error(what + ": " + zerror(rc));
}

void session_watcher(zhandle_t*, int, int, const char*, void*) {}

std::vector<std::string> sorted(const String_vector* kids) {
  std::vector<std::string> v;
  if (kids == nullptr) return v;
  v.reserve(static_cast<std::size_t>(kids->count));
  for (int i = 0; i < kids->count; ++i) v.emplace_back(kids->data[i]);
  std::sort(v.begin(), v.end());  // "lock-%010d": text order is sequence order
  return v;
}

std::string base_name(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// Blocking recipe: the predecessor's deletion wakes the waiting thread.
void wake_watcher(zhandle_t*, int type, int, const char*, void* ctx) {
  if (type == ZOO_SESSION_EVENT) return;
  auto* c = static_cast<FloorSession::Context*>(ctx);
  std::lock_guard lk(c->mu);
  c->fired = true;
  c->cv.notify_all();
}

// --- the asynchronous recipe -------------------------------------------------

void list_async(FloorSession::Context* c);

void finish(FloorSession::Context* c, int rc) {
  auto granted = std::move(c->granted);
  c->granted = nullptr;
  if (granted) granted(rc, c->node);
}

void async_watcher(zhandle_t*, int type, int, const char* path, void* ctx) {
  auto* c = static_cast<FloorSession::Context*>(ctx);
  if (type != ZOO_DELETED_EVENT || path == nullptr || c->waiting_for != path) return;
  c->waiting_for.clear();
  list_async(c);  // the textbook step: re-list on every wake
}

void exists_done(int rc, const Stat*, const void* data) {
  auto* c = static_cast<FloorSession::Context*>(const_cast<void*>(data));
  if (rc == ZNONODE) {
    c->waiting_for.clear();
    list_async(c);
  } else if (rc != ZOK) {
    finish(c, rc);
  }
}

void children_done(int rc, const String_vector* kids, const void* data) {
  auto* c = static_cast<FloorSession::Context*>(const_cast<void*>(data));
  if (rc != ZOK) {
    finish(c, rc);
    return;
  }
  const auto v = sorted(kids);
  const auto me = base_name(c->node);
  const auto it = std::find(v.begin(), v.end(), me);
  if (it == v.end()) {
    finish(c, ZNONODE);
  } else if (it == v.begin()) {
    finish(c, ZOK);
  } else {
    c->waiting_for = c->lock + "/" + *(it - 1);
    const int r = zoo_awexists(c->session->zh(), c->waiting_for.c_str(), async_watcher, c, exists_done, c);
    if (r != ZOK) finish(c, r);
  }
}

void list_async(FloorSession::Context* c) {
  const int r = zoo_aget_children(c->session->zh(), c->lock.c_str(), 0, children_done, c);
  if (r != ZOK) finish(c, r);
}

void created(int rc, const char* value, const void* data) {
  auto* c = static_cast<FloorSession::Context*>(const_cast<void*>(data));
  if (rc != ZOK) {
    finish(c, rc);
    return;
  }
  c->node = value;
  list_async(c);
}

void deleted(int rc, const void* data) {
  auto* c = static_cast<FloorSession::Context*>(const_cast<void*>(data));
  auto done = std::move(c->release_done);
  c->release_done = nullptr;
  if (done) done(rc);
}

}  // namespace

FloorSession::FloorSession(const std::string& connect, std::chrono::milliseconds session_timeout) {
  zoo_set_debug_level(ZOO_LOG_LEVEL_ERROR);
  zh_ = zookeeper_init(connect.c_str(), session_watcher, static_cast<int>(session_timeout.count()), nullptr,
                       nullptr, 0);
  if (zh_ == nullptr) throw std::runtime_error("zookeeper_init failed for " + connect);
  // The same as zklock::Client (ClientOptions::resolution_delay = 30 s).
  zoo_set_servers_resolution_delay(zh_, 30'000);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (zoo_state(zh_) != ZOO_CONNECTED_STATE) {
    if (std::chrono::steady_clock::now() > deadline) {
      zookeeper_close(zh_);
      throw std::runtime_error("floor session: no connection to " + connect + " within 10 s");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

FloorSession::~FloorSession() {
  if (zh_ != nullptr) zookeeper_close(zh_);  // no callback runs after this returns
}

FloorSession::Context* FloorSession::new_context() {
  std::lock_guard lk(mu_);
  contexts_.push_back(std::make_unique<Context>());
  contexts_.back()->session = this;
  return contexts_.back().get();
}

void FloorSession::ensure_path(const std::string& path) {
  for (std::size_t pos = 1;; ++pos) {
    pos = path.find('/', pos);
    const auto prefix = pos == std::string::npos ? path : path.substr(0, pos);
    const int rc = zoo_create(zh_, prefix.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, 0, nullptr, 0);
    if (rc != ZOK && rc != ZNODEEXISTS) throw zk_error("create " + prefix, rc);
    if (pos == std::string::npos) return;
  }
}

FloorLock::FloorLock(FloorSession& session, std::string lock_path)
    : session_(&session), path_(std::move(lock_path)) {}

void FloorLock::acquire(std::chrono::milliseconds wait_limit) {
  char buf[512];
  const std::string prefix = path_ + "/lock-";
  int rc = zoo_create(session_->zh(), prefix.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE,
                      ZOO_EPHEMERAL | ZOO_SEQUENCE, buf, sizeof buf);
  if (rc != ZOK) throw zk_error("create " + prefix, rc);
  node_ = buf;
  const auto me = base_name(node_);
  for (;;) {
    String_vector kids{};
    rc = zoo_get_children(session_->zh(), path_.c_str(), 0, &kids);
    if (rc != ZOK) throw zk_error("get children " + path_, rc);
    const auto v = sorted(&kids);
    deallocate_String_vector(&kids);
    const auto it = std::find(v.begin(), v.end(), me);
    if (it == v.end()) throw std::runtime_error("floor: our node " + node_ + " vanished");
    if (it == v.begin()) return;
    const auto pred = path_ + "/" + *(it - 1);
    auto* ctx = session_->new_context();
    rc = zoo_wexists(session_->zh(), pred.c_str(), wake_watcher, ctx, nullptr);
    if (rc == ZNONODE) continue;
    if (rc != ZOK) throw zk_error("exists " + pred, rc);
    std::unique_lock lk(ctx->mu);
    if (!ctx->cv.wait_for(lk, wait_limit, [&] { return ctx->fired; })) {
      throw std::runtime_error("floor: waited longer than the limit for " + pred);
    }
  }
}

void FloorLock::release() {
  const int rc = zoo_delete(session_->zh(), node_.c_str(), -1);
  if (rc != ZOK) throw zk_error("delete " + node_, rc);
  node_.clear();
}

void floor_acquire_async(FloorSession& session, const std::string& lock_path,
                         std::function<void(int rc, const std::string& node)> granted) {
  auto* c = session.new_context();
  c->lock = lock_path;
  c->granted = std::move(granted);
  const std::string prefix = lock_path + "/lock-";
  const int r = zoo_acreate(session.zh(), prefix.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE,
                            ZOO_EPHEMERAL | ZOO_SEQUENCE, created, c);
  if (r != ZOK) finish(c, r);
}

void floor_release_async(FloorSession& session, const std::string& node, std::function<void(int rc)> done) {
  auto* c = session.new_context();
  c->release_done = std::move(done);
  const int r = zoo_adelete(session.zh(), node.c_str(), -1, deleted, c);
  if (r != ZOK) deleted(r, c);
}

}  // namespace zklock::bench
