// ZooKeeper operations of zklock::Client: the C-client glue in one place.
// Every C callback here is a noexcept trampoline that converts the reply,
// hands it to the caller's std::function and frees its context.
#include <atomic>
#include <cstring>
#include <random>

#include "client_impl.hpp"
#include "zklock/protocol/paths.hpp"
#include "zklock/token.hpp"

namespace zklock {
namespace {

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

Stat to_stat(const ::Stat* s) {
  Stat out;
  if (s == nullptr) return out;
  out.czxid = s->czxid;
  out.mzxid = s->mzxid;
  out.ctime = s->ctime;
  out.mtime = s->mtime;
  out.pzxid = s->pzxid;
  out.version = s->version;
  out.cversion = s->cversion;
  out.aversion = s->aversion;
  out.ephemeral_owner = s->ephemeralOwner;
  out.data_length = s->dataLength;
  out.num_children = s->numChildren;
  return out;
}

// True when the server itself produced the answer (so the session was alive
// when the request was sent): not a transient or session-fatal code
// (error.hpp), nor one the C client makes up locally (it refused to send:
// ZINVALIDSTATE; ZSYSTEMERROR; ZSESSIONMOVED, which closes the connection).
bool server_answered(int rc) {
  const Status st{rc};
  return !is_transient(st) && !is_session_fatal(st) && !st.is(Errc::invalid_state) &&
         !st.is(Errc::session_moved) && !st.is(Errc::system_error);
}

struct OpBase {
  Client::Impl* impl = nullptr;
  Handle* h = nullptr;
  Clock::time_point sent;
  WatchCtx* watch = nullptr;
  // The handle's connection count when the request was issued (Handle::
  // connection): an answer is evidence for the bound only on that connection.
  std::uint64_t connection = 0;
  // The context crosses from the issuing thread to the C client's completion
  // thread. The library queues it under its own mutexes, but ThreadSanitizer
  // does not see a happens-before on every path through the uninstrumented
  // library (it flagged the heartbeat's and the ensemble id's completions), so
  // the hand-off is made explicit: released by track(), acquired by
  // begin_completion().
  std::atomic<bool> published{false};
};


template <class Fn>
struct OpCtx : OpBase {
  Fn done;
};

// Every request in flight is registered with its handle, so that one the C
// client never completes (zookeeper_close drops requests still queued) is
// failed with ZCLOSING and freed by close_handle: each callback runs once.
void untrack(Handle* h, const void* ctx) {
  std::lock_guard lk(h->watches_mu);
  h->pending.erase(ctx);
}

template <class Ctx>
void track(Handle* h, Ctx* ctx, const std::function<void(int)>& fail);

// Common prologue of every completion: the validity bound, dropping a watch
// the server did not register, and the callback scope. Only writes are
// `leader_ordered`: a follower answers reads from its own copy, even one cut
// off from the leader, so a read proves nothing about the session (issue 15).
template <class Ctx>
std::unique_ptr<Ctx> begin_completion(const void* data, int rc, bool watch_registered,
                                      bool leader_ordered = false) {
  std::unique_ptr<Ctx> ctx(static_cast<Ctx*>(const_cast<void*>(data)));
  (void)ctx->published.load(std::memory_order_acquire);  // see OpBase::published
  untrack(ctx->h, ctx.get());
  if (leader_ordered && server_answered(rc)) ctx->impl->note_ordered(ctx->h, ctx->sent, ctx->connection);
  if (ctx->watch != nullptr && !watch_registered) {
    std::lock_guard lk(ctx->h->watches_mu);
    if (ctx->h->watches.erase(ctx->watch) > 0) free_watch_ctx(ctx->watch);
  }
  return ctx;
}

// For a request the C client refused: nothing will complete it.
template <class Ctx>
void drop_unsent(Ctx* ctx) {
  untrack(ctx->h, ctx);
  if (ctx->watch != nullptr) {
    std::lock_guard lk(ctx->h->watches_mu);
    if (ctx->h->watches.erase(ctx->watch) > 0) free_watch_ctx(ctx->watch);
  }
  delete ctx;
}

template <class Ctx>
void track(Handle* h, Ctx* ctx, const std::function<void(int)>& fail) {
  ctx->published.store(true, std::memory_order_release);
  std::lock_guard lk(h->watches_mu);
  h->pending.emplace(ctx, [ctx, fail] {
    fail(ZCLOSING);
    drop_unsent(ctx);
  });
}

template <class Fn>
void call_safely(Client::Impl* impl, Fn&& fn) noexcept {
  try {
    fn();
  } catch (const std::exception& e) {
    impl->log->error("zklock completion callback threw: {}", e.what());
  } catch (...) {
    impl->log->error("zklock completion callback threw a non-standard exception");
  }
}

}  // namespace

struct WatchCtx {
  Watcher fn;
  Handle* h = nullptr;
};

void free_watch_ctx(WatchCtx* w) noexcept { delete w; }

namespace {

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

WatchCtx* arm_watch(Handle* h, Watcher fn) {
  if (!fn) return nullptr;
  auto* w = new WatchCtx{std::move(fn), h};
  std::lock_guard lk(h->watches_mu);
  h->watches.insert(w);
  return w;
}

}  // namespace

void Client::Impl::issue(const std::function<int(zhandle_t*, Handle*)>& fn,
                         std::function<void(int)> fail) {
  int rc = ZCLOSING;
  {
    std::shared_lock lk(handle_mu_);
    if (handle_ != nullptr && !closing_) rc = fn(handle_->zh, handle_);
  }
  if (rc != ZOK) {
    const auto ep = epoch();
    defer([fail = std::move(fail), rc, ep] {
      CallbackScope scope(ep);
      fail(rc);
    });
  }
}

using CreateDone = std::function<void(Status, const std::string&, const Stat&)>;
void Client::Impl::create(std::string path, std::string data, CreateMode mode, CreateDone done) {
  using Ctx = OpCtx<CreateDone>;
  auto shared_done = std::make_shared<CreateDone>(std::move(done));
  std::function<void(int)> fail = [shared_done](int rc) { (*shared_done)(Status{rc}, "", Stat{}); };
  issue(
      [&](zhandle_t* zh, Handle* h) {
        auto* ctx = new Ctx{{this, h, Clock::now(), nullptr, h->connection.load()}, *shared_done};
        track(h, ctx, fail);
        const int rc = zoo_acreate2(
            zh, path.c_str(), data.data(), static_cast<int>(data.size()), acl(), to_zoo_mode(mode),
            [](int rc, const char* value, const ::Stat* st, const void* d) noexcept {
              auto c = begin_completion<Ctx>(d, rc, false, true);
              CallbackScope scope(c->h->epoch);
              call_safely(c->impl, [&] { c->done(Status{rc}, value ? value : "", to_stat(st)); });
            },
            ctx);
        if (rc != ZOK) drop_unsent(ctx);
        return rc;
      },
      fail);
}

using ChildrenDone = std::function<void(Status, std::vector<std::string>)>;
void Client::Impl::get_children(std::string path, Watcher watch, ChildrenDone done) {
  using Ctx = OpCtx<ChildrenDone>;
  auto shared_done = std::make_shared<ChildrenDone>(std::move(done));
  std::function<void(int)> fail = [shared_done](int rc) { (*shared_done)(Status{rc}, {}); };
  issue(
      [&](zhandle_t* zh, Handle* h) {
        auto* ctx = new Ctx{{this, h, Clock::now(), arm_watch(h, std::move(watch))}, *shared_done};
        track(h, ctx, fail);
        const int rc = zoo_awget_children(
            zh, path.c_str(), ctx->watch ? watch_trampoline : nullptr, ctx->watch,
            [](int rc, const String_vector* sv, const void* d) noexcept {
              auto c = begin_completion<Ctx>(d, rc, rc == ZOK);
              std::vector<std::string> names;
              if (rc == ZOK && sv != nullptr) {
                names.reserve(static_cast<std::size_t>(sv->count));
                for (int i = 0; i < sv->count; ++i) names.emplace_back(sv->data[i]);
              }
              CallbackScope scope(c->h->epoch);
              call_safely(c->impl, [&] { c->done(Status{rc}, std::move(names)); });
            },
            ctx);
        if (rc != ZOK) drop_unsent(ctx);
        return rc;
      },
      fail);
}

using StatDone = std::function<void(Status, const Stat&)>;
void Client::Impl::exists(std::string path, Watcher watch, StatDone done) {
  using Ctx = OpCtx<StatDone>;
  auto shared_done = std::make_shared<StatDone>(std::move(done));
  std::function<void(int)> fail = [shared_done](int rc) { (*shared_done)(Status{rc}, Stat{}); };
  issue(
      [&](zhandle_t* zh, Handle* h) {
        auto* ctx = new Ctx{{this, h, Clock::now(), arm_watch(h, std::move(watch))}, *shared_done};
        track(h, ctx, fail);
        const int rc = zoo_awexists(
            zh, path.c_str(), ctx->watch ? watch_trampoline : nullptr, ctx->watch,
            [](int rc, const ::Stat* st, const void* d) noexcept {
              // exists registers its watch both when the node exists and when it does not.
              auto c = begin_completion<Ctx>(d, rc, rc == ZOK || rc == ZNONODE);
              CallbackScope scope(c->h->epoch);
              call_safely(c->impl, [&] { c->done(Status{rc}, to_stat(rc == ZOK ? st : nullptr)); });
            },
            ctx);
        if (rc != ZOK) drop_unsent(ctx);
        return rc;
      },
      fail);
}

using GetDone = std::function<void(Status, std::string, const Stat&)>;
void Client::Impl::get(std::string path, Watcher watch, GetDone done) {
  using Ctx = OpCtx<GetDone>;
  auto shared_done = std::make_shared<GetDone>(std::move(done));
  std::function<void(int)> fail = [shared_done](int rc) { (*shared_done)(Status{rc}, std::string(), Stat{}); };
  issue(
      [&](zhandle_t* zh, Handle* h) {
        auto* ctx = new Ctx{{this, h, Clock::now(), arm_watch(h, std::move(watch))}, *shared_done};
        track(h, ctx, fail);
        const int rc = zoo_awget(
            zh, path.c_str(), ctx->watch ? watch_trampoline : nullptr, ctx->watch,
            [](int rc, const char* value, int len, const ::Stat* st, const void* d) noexcept {
              auto c = begin_completion<Ctx>(d, rc, rc == ZOK);
              std::string bytes = (rc == ZOK && value && len > 0) ? std::string(value, static_cast<std::size_t>(len))
                                                                   : std::string();
              CallbackScope scope(c->h->epoch);
              call_safely(c->impl, [&] { c->done(Status{rc}, std::move(bytes), to_stat(st)); });
            },
            ctx);
        if (rc != ZOK) drop_unsent(ctx);
        return rc;
      },
      fail);
}

void Client::Impl::set_data(std::string path, std::string data, int version, StatDone done) {
  using Ctx = OpCtx<StatDone>;
  auto shared_done = std::make_shared<StatDone>(std::move(done));
  std::function<void(int)> fail = [shared_done](int rc) { (*shared_done)(Status{rc}, Stat{}); };
  issue(
      [&](zhandle_t* zh, Handle* h) {
        auto* ctx = new Ctx{{this, h, Clock::now(), nullptr, h->connection.load()}, *shared_done};
        track(h, ctx, fail);
        const int rc = zoo_aset(
            zh, path.c_str(), data.data(), static_cast<int>(data.size()), version,
            [](int rc, const ::Stat* st, const void* d) noexcept {
              auto c = begin_completion<Ctx>(d, rc, false, true);
              CallbackScope scope(c->h->epoch);
              call_safely(c->impl, [&] { c->done(Status{rc}, to_stat(st)); });
            },
            ctx);
        if (rc != ZOK) drop_unsent(ctx);
        return rc;
      },
      fail);
}

using VoidDone = std::function<void(Status)>;
void Client::Impl::remove(std::string path, int version, VoidDone done) {
  using Ctx = OpCtx<VoidDone>;
  auto shared_done = std::make_shared<VoidDone>(std::move(done));
  std::function<void(int)> fail = [shared_done](int rc) { (*shared_done)(Status{rc}); };
  issue(
      [&](zhandle_t* zh, Handle* h) {
        auto* ctx = new Ctx{{this, h, Clock::now(), nullptr, h->connection.load()}, *shared_done};
        track(h, ctx, fail);
        const int rc = zoo_adelete(
            zh, path.c_str(), version,
            [](int rc, const void* d) noexcept {
              auto c = begin_completion<Ctx>(d, rc, false, true);
              CallbackScope scope(c->h->epoch);
              call_safely(c->impl, [&] { c->done(Status{rc}); });
            },
            ctx);
        if (rc != ZOK) drop_unsent(ctx);
        return rc;
      },
      fail);
}

namespace {
using MultiDone = std::function<void(Status, std::vector<OpResult>)>;
// A multi's request and result arrays must live until its completion.
struct MultiCtx : OpBase {
  MultiDone done;
  std::vector<Op> ops;
  std::vector<zoo_op_t> zops;
  std::vector<zoo_op_result_t> results;
  std::vector<std::array<char, 1024>> path_buffers;
};
}  // namespace

void Client::Impl::multi(std::vector<Op> ops, MultiDone done) {
  auto shared_done = std::make_shared<MultiDone>(std::move(done));
  std::function<void(int)> fail = [shared_done](int rc) { (*shared_done)(Status{rc}, {}); };
  issue(
      [&](zhandle_t* zh, Handle* h) {
        auto* ctx = new MultiCtx;
        ctx->impl = this;
        ctx->h = h;
        ctx->sent = Clock::now();
        ctx->connection = h->connection.load();
        ctx->done = *shared_done;
        ctx->ops = std::move(ops);
        track(h, ctx, fail);
        const auto n = ctx->ops.size();
        ctx->zops.resize(n);
        ctx->results.resize(n);
        ctx->path_buffers.resize(n);
        for (std::size_t i = 0; i < n; ++i) {
          const Op& op = ctx->ops[i];
          switch (op.kind) {
            case Op::Kind::create:
              zoo_create_op_init(&ctx->zops[i], op.path.c_str(), op.data.data(),
                                 static_cast<int>(op.data.size()), acl(), to_zoo_mode(op.mode),
                                 ctx->path_buffers[i].data(), static_cast<int>(ctx->path_buffers[i].size()));
              break;
            case Op::Kind::remove: zoo_delete_op_init(&ctx->zops[i], op.path.c_str(), op.version); break;
            case Op::Kind::set_data:
              zoo_set_op_init(&ctx->zops[i], op.path.c_str(), op.data.data(), static_cast<int>(op.data.size()),
                              op.version, nullptr);
              break;
            case Op::Kind::check: zoo_check_op_init(&ctx->zops[i], op.path.c_str(), op.version); break;
          }
        }
        const int rc = zoo_amulti(
            zh, static_cast<int>(n), ctx->zops.data(), ctx->results.data(),
            [](int rc, const void* d) noexcept {
              // A multi is one transaction through the leader, even when it only checks.
              auto c = begin_completion<MultiCtx>(d, rc, false, true);
              std::vector<OpResult> out(c->ops.size());
              for (std::size_t i = 0; i < out.size(); ++i) {
                out[i].status = Status{c->results[i].err};
                if (c->ops[i].kind == Op::Kind::create && c->results[i].err == ZOK) {
                  out[i].created_path = c->path_buffers[i].data();
                }
              }
              CallbackScope scope(c->h->epoch);
              call_safely(c->impl, [&] { c->done(Status{rc}, std::move(out)); });
            },
            ctx);
        if (rc != ZOK) drop_unsent(ctx);
        return rc;
      },
      fail);
}

namespace {
// The heartbeat's two requests share this: the read counts only when the sync
// before it was answered.
struct HeartbeatState {
  bool sync_ok = false;
  std::function<void(bool)> done;
};
using HeartbeatCtx = OpCtx<std::shared_ptr<HeartbeatState>>;
}  // namespace

// sync makes the server we are connected to catch up with the leader: the
// leader orders the sync after every transaction it committed before, and the
// server answers it only after applying them, then answers the read queued
// behind it in our session. So the read's answer proves that the leader
// processed our sync after `sent` and had not yet closed our session.
void Client::Impl::sync_then_read(std::function<void(bool)> done) {
  auto state = std::make_shared<HeartbeatState>();
  state->done = std::move(done);
  std::function<void(int)> fail = [state](int) {
    if (auto d = std::exchange(state->done, nullptr)) d(false);
  };
  issue(
      [&](zhandle_t* zh, Handle* h) -> int {
        const auto sent = Clock::now();
        const auto connection = h->connection.load();
        auto* sync_ctx = new HeartbeatCtx{{this, h, sent, nullptr, connection}, state};
        track(h, sync_ctx, fail);
        int rc = zoo_async(
            zh, "/",
            [](int rc, const char*, const void* d) noexcept {
              auto c = begin_completion<HeartbeatCtx>(d, rc, false);
              c->done->sync_ok = rc == ZOK;
            },
            sync_ctx);
        if (rc != ZOK) {
          drop_unsent(sync_ctx);
          return rc;
        }
        auto* read_ctx = new HeartbeatCtx{{this, h, sent, nullptr, connection}, state};
        track(h, read_ctx, fail);
        rc = zoo_aexists(
            zh, "/", 0,
            [](int rc, const ::Stat*, const void* d) noexcept {
              auto c = begin_completion<HeartbeatCtx>(d, rc, false);
              const bool ordered = c->done->sync_ok && server_answered(rc);
              if (ordered) c->impl->note_ordered(c->h, c->sent, c->connection);
              CallbackScope scope(c->h->epoch);
              if (auto d2 = std::exchange(c->done->done, nullptr)) call_safely(c->impl, [&] { d2(ordered); });
            },
            read_ctx);
        if (rc != ZOK) {
          // The sync went out; its completion runs, and the read never will.
          drop_unsent(read_ctx);
          state->done = nullptr;
          return static_cast<int>(ZOK);
        }
        return rc;
      },
      fail);
}

namespace {
std::string new_uuid() {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<std::uint64_t>(rd()) << 32) ^ rd());
  std::uniform_int_distribution<int> hex(0, 15);
  std::string s = "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx";
  for (char& c : s) {
    if (c == 'x' || c == 'y') {
      int v = hex(gen);
      if (c == 'y') v = (v & 0x3) | 0x8;
      c = "0123456789abcdef"[v];
    }
  }
  return s;
}
const std::string kEnsembleIdPath(protocol::kEnsembleIdPath);
}  // namespace

void Client::Impl::ensemble_id_async(std::function<void(Status, const std::string&)> done) {
  const auto ep = epoch();
  {
    std::lock_guard lk(mu_);
    if (!ensemble_id_.empty() && ensemble_epoch_ == ep) {
      defer([done = std::move(done), id = ensemble_id_] { done(Status{}, id); });
      return;
    }
  }
  read_ensemble_id(ep, 2, std::make_shared<std::function<void(Status, const std::string&)>>(std::move(done)));
}

// read → (absent) create /zklock, create the id → read again. Race-safe:
// whoever creates the node first wins and everyone reads the winner's id.
// Each step captures only what it needs, never itself: a callback that is
// dropped instead of run leaves no reference cycle behind.
void Client::Impl::read_ensemble_id(std::uint64_t ep, int attempts_left,
                                    std::shared_ptr<std::function<void(Status, const std::string&)>> done) {
  get(kEnsembleIdPath, nullptr, [this, done, ep, attempts_left](Status st, std::string data, const Stat&) {
    if (st.ok()) {
      if (!is_uuid(data)) {
        const std::string shown = data.size() > 64 ? data.substr(0, 64) + "..." : data;
        log->error("{} holds '{}', not a UUID (see docs/protocol.md)", kEnsembleIdPath, shown);
        (*done)(Status::own_error(Errc::protocol_error, kEnsembleIdPath + " holds '" + shown +
                                                            "', not a UUID (see docs/protocol.md)"),
                "");
        return;
      }
      {
        std::lock_guard lk(mu_);
        ensemble_id_ = data;
        ensemble_epoch_ = ep;
      }
      (*done)(st, data);
      return;
    }
    if (!st.is(Errc::no_node) || attempts_left == 0) {
      (*done)(st, "");
      return;
    }
    auto read_again = [this, done, ep, attempts_left](Status, const std::string&, const Stat&) {
      read_ensemble_id(ep, attempts_left - 1, done);
    };
    create(std::string(protocol::kMetadataRoot), "", CreateMode::persistent, [this, read_again](Status, const std::string&, const Stat&) {
      create(kEnsembleIdPath, new_uuid(), CreateMode::persistent, read_again);
    });
  });
}

}  // namespace zklock
