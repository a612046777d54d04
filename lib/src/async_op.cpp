// The op shape, non-template half: issuing under the handle lock, watches, what a closing Handle owes.
#include "async_op.hpp"

#include <vector>

#include "session_pool.hpp"

namespace zklock {

bool quorum_committed(int rc) {
  switch (rc) {
    case ZOK:
    // PrepRequestProcessor.pRequest2Txn sets the header first, so each of
    // these, thrown after it, becomes an ErrorTxn that is proposed and
    // committed like the write (pRequestHelper's catch; ProposalRequestProcessor
    // proposes every request with a header).
    case ZNONODE:
    case ZNODEEXISTS:
    case ZBADVERSION:
    case ZNOTEMPTY:
    case ZNOCHILDRENFOREPHEMERALS:
      return true;
    default:
      return false;
  }
}

bool server_answered(int rc) {
  if (rc == ZOK) return true;
  if (rc > ZAPIERROR) return false;  // system errors: all the C client's (ZCONNECTIONLOSS, ZOPERATIONTIMEOUT, ...)
  switch (rc) {
    case ZCLOSING:           // zookeeper_close
    case ZSESSIONEXPIRED:    // the handle's state after expiry
    case ZAUTHFAILED:        // the handle's state after a failed auth
    case ZINVALIDCALLBACK:
    case ZNOTHING:
      return false;
    default:
      return true;
  }
}

void link_pending(Handle* h, OpBase* op) {
  std::lock_guard lk(h->watches_mu);
  op->prev = nullptr;
  op->next = h->pending;
  if (h->pending != nullptr) h->pending->prev = op;
  h->pending = op;
  op->tracked = true;
  ++h->pending_count;
}

void untrack(Handle* h, OpBase* op) {
  std::lock_guard lk(h->watches_mu);
  if (!op->tracked) return;
  if (op->prev != nullptr) op->prev->next = op->next;
  else h->pending = op->next;
  if (op->next != nullptr) op->next->prev = op->prev;
  op->prev = op->next = nullptr;
  op->tracked = false;
  --h->pending_count;
}

void drop_watch(Handle* h, WatchCtx* w) {
  if (w == nullptr) return;
  std::lock_guard lk(h->watches_mu);
  if (h->watches.erase(w) > 0) delete w;
}

bool take_back_locked(Handle* h, WatchCtx* w, const std::string& path) {
  // local = 1: removed from the C client's tables now, no request.
  if (zoo_remove_watches(h->zh.get(), path.c_str(), ZWATCHTYPE_DATA, watch_trampoline, w, 1) != ZOK) return false;
  h->watches.erase(w);
  delete w;
  return true;
}

void settle_abandoned(Handle* h, WatchCtx* w, std::uint64_t id) {
  std::lock_guard lk(h->watches_mu);
  // Still registered (not fired), the same watch (not a reused address)?
  if (h->watches.count(w) == 0 || w->id != id || w->abandoned_path.empty()) return;
  take_back_locked(h, w, w->abandoned_path);  // false: its event is queued, the trampoline frees it
}

WatchCtx* arm_watch(Handle* h, Watcher fn) {
  if (!fn) return nullptr;
  static std::atomic<std::uint64_t> next_id{0};
  auto* w = new WatchCtx{std::move(fn), h, ++next_id};
  std::lock_guard lk(h->watches_mu);
  h->watches.insert(w);
  return w;
}

void watch_trampoline(zhandle_t*, int type, int, const char* path, void* data) noexcept {
  if (type == ZOO_SESSION_EVENT) return;  // session events go to the global watcher
  auto* w = static_cast<WatchCtx*>(data);
  {
    std::lock_guard lk(w->h->watches_mu);
    if (w->h->watches.erase(w) == 0) return;  // already freed (cannot happen; be safe)
  }
  std::unique_ptr<WatchCtx> owned(w);
  WatchEvent ev{WatchEvent::Type::changed, path ? path : ""};
  if (type == ZOO_CREATED_EVENT) ev.type = WatchEvent::Type::created;
  else if (type == ZOO_DELETED_EVENT) ev.type = WatchEvent::Type::deleted;
  else if (type == ZOO_CHILD_EVENT) ev.type = WatchEvent::Type::child;
  else if (type != ZOO_CHANGED_EVENT) return;
  CallbackScope scope(w->h->epoch);
  call_safely(w->h->impl, [&] { owned->fn(ev); });
}

Handle::~Handle() {
  // May block (it sends closeSession); runs pending completions with ZCLOSING.
  zh.reset();
  // Requests the C client dropped without completing them (still queued at
  // close) fail now, once each, with ZCLOSING. The C client is closed: no
  // completion runs any more, so the list changes only below.
  std::vector<OpBase*> dropped;
  {
    std::lock_guard lk(watches_mu);
    dropped.reserve(pending_count);
    for (OpBase* op = pending; op != nullptr; op = op->next) dropped.push_back(op);
  }
  for (OpBase* op : dropped) {
    CallbackScope scope(epoch);
    op->closing(op);  // fails its `done`, unlinks and frees it
  }
  std::lock_guard lk(watches_mu);
  for (WatchCtx* w : watches) delete w;
  watches.clear();
}

Client::Impl::Census Client::Impl::census() {
  Census c;
  c.timers = executor_.pending_timers();
  if (shards) {  // a Client's first session counts the others too
    for (const auto& s : shards->all()) {
      const auto o = s->census();
      c.watches += o.watches;
      c.requests += o.requests;
      c.timers += o.timers;
    }
  }
  std::shared_lock lk(handle_mu_);
  if (handle_ == nullptr) return c;
  std::lock_guard wl(handle_->watches_mu);
  c.watches += handle_->watches.size();
  c.requests += handle_->pending_count;
  return c;
}

int Client::Impl::issue(IssueFn fn, std::uint64_t session) {
  std::shared_lock lk(handle_mu_);
  if (handle_ == nullptr || closing_) return ZCLOSING;
  if (session != kAnySession && handle_->epoch != session) return ZSESSIONEXPIRED;
  // Ended for a reconnect loop, not replaced yet: as good as expired.
  if (handle_->abandoned.load(std::memory_order_relaxed)) return ZSESSIONEXPIRED;
  return fn(handle_->zh.get(), handle_.get());
}

}  // namespace zklock
