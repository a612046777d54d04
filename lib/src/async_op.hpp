// The one shape every asynchronous ZooKeeper request goes through: context, tracking, trampoline, completion.
//
// A request's life. send_op() allocates its context (OpCtx), which holds the
// only copy of `done`, and, under the shared handle lock (Client::Impl::
// issue), links it into its Handle's list of requests in flight (track) and
// passes it to one zoo_a* call. Exactly one of three ends it:
//  - the C client answers: the completion trampoline ends in complete_read(),
//    complete_write() or begin_completion() + finish(), which unlink and
//    free the context and call `done` once;
//  - the C client refuses the request (non-ZOK), or there is no handle: the
//    context is unlinked and freed at once, and `done` fails with that code
//    on the timer thread;
//  - the C client drops it at close: Handle::~Handle fails `done` with
//    ZCLOSING (OpBase::closing) and frees the context.
// Nothing else is allocated per request beyond the C client's own: a
// request used to cost eight more allocations (a shared `done`, its copies
// and type-erased failure callbacks, a map entry), each made on the issuing
// thread and freed on the completion thread.
// C-client callbacks are noexcept trampolines; an exception from `done` is
// caught and logged (call_safely).
#pragma once

#include <atomic>
#include <memory>
#include <type_traits>
#include <utility>
#include <variant>

#include "client_impl.hpp"
#include "clock.hpp"

namespace zklock {

// True when the answer to a write proves that the leader prepared it for our
// live session and a quorum committed it: a code only the leader's
// PrepRequestProcessor produces, after giving the request a transaction
// header, so that it went through Zab as the write or as an error
// transaction (docs/design.md, "What counts"). A list of the codes that do,
// not of those that do not: an unknown code is no evidence, which can only
// end a lease early. Never counted: codes the C client makes up (connection
// loss, timeouts, closing, ZINVALIDSTATE, ZSYSTEMERROR, ZMARSHALLINGERROR),
// ZSESSIONEXPIRED and ZSESSIONMOVED, and codes a server produces alone —
// ZTHROTTLEDOP (FinalRequestProcessor, for a request the RequestThrottler
// marked and PrepRequestProcessor skipped), ZNOTREADONLY (a read-only
// server), and ZNOAUTH (an eager ACL check on the follower answers it
// without forwarding: ZooKeeperServer.authWriteRequest).
bool quorum_committed(int rc);
// True when `rc` is a server's answer to the request (ZOK or an API error a
// server sends), not one the C client made up (connection loss, timeouts,
// closing, session expired, ...): what shows that a connection carried an
// answer (Handle::answered_on, the reconnect-loop rule).
bool server_answered(int rc);

struct OpBase {
  Client::Impl* impl = nullptr;
  Handle* h = nullptr;
  Clock::time_point sent;
  WatchCtx* watch = nullptr;
  // The handle's connection count when the request was issued (Handle::
  // connection): an answer is evidence for the bound only on that connection.
  std::uint64_t connection = 0;
  std::uint64_t watch_id = 0;  // watch->id, to know it again at the completion
  // The context crosses from the issuing thread to the C client's completion
  // thread. The library queues it under its own mutexes, but ThreadSanitizer
  // does not see a happens-before on every path through the uninstrumented
  // library (it flagged the heartbeat's and the ensemble id's completions), so
  // the hand-off is made explicit: released by track(), acquired by
  // begin_completion(). Everything in the context is written before track(),
  // and the issuing thread reads nothing of it after: from then on the
  // completion may free it (what the zoo_a* call needs is passed by value).
  std::atomic<bool> published{false};
  // Linked into h's requests in flight from track() to untrack().
  // GUARDED_BY(h->watches_mu)
  OpBase* prev = nullptr;
  OpBase* next = nullptr;
  bool tracked = false;
  // Set by track(): fails `done` with ZCLOSING, then unlinks and frees the
  // context. Handle::~Handle calls it for a request the C client dropped.
  void (*closing)(OpBase*) = nullptr;
};

// `done` is what the completion calls; `extra`, what must live until then
// (a multi's request and result arrays).
template <class Done, class Extra = std::monostate>
struct OpCtx : OpBase {
  using done_type = Done;
  using extra_type = Extra;
  Done done;
  Extra extra{};
};

// A watcher armed by a read. Freed exactly once: by its event, by the read's
// completion when the server did not register it, or by Handle::~Handle.
struct WatchCtx {
  Watcher fn;
  Handle* h = nullptr;
  std::uint64_t id = 0;  // unique in the process (Client::Impl::WatchRef)
  // Set (to its path) by Client::Impl::unwatch when the watch could not be
  // taken back yet because its read was unanswered: the read's completion
  // takes it back then (settle_abandoned). GUARDED_BY(h->watches_mu)
  std::string abandoned_path;
};
// Registers a watch context with `h`; nullptr for no watcher.
WatchCtx* arm_watch(Handle* h, Watcher fn);
void watch_trampoline(zhandle_t*, int type, int state, const char* path, void* data) noexcept;
// The watcher arguments of a zoo_aw* call ({nullptr, nullptr} for none).
struct ArmedWatch {
  watcher_fn fn = nullptr;
  void* ctx = nullptr;
};

// Unregisters and frees `w` (if any) unless its event already did.
void drop_watch(Handle* h, WatchCtx* w);
// The read that set watch `id` (at `w`) was answered and the watch is set:
// if it was given up meanwhile (WatchCtx::abandoned_path), take it back now.
void settle_abandoned(Handle* h, WatchCtx* w, std::uint64_t id);
// REQUIRES h->watches_mu, `w` registered with `h`: removes data watch `w` on
// `path` from the C client (locally, no request) and frees it. False when
// the C client does not hold it (its event is queued, or its read is not
// answered yet): then `w` stays.
bool take_back_locked(Handle* h, WatchCtx* w, const std::string& path);
void link_pending(Handle* h, OpBase* op);  // REQUIRES !op->tracked
void untrack(Handle* h, OpBase* op);       // a no-op when not linked

// For a request nothing will complete (refused, or dropped at close): unlink
// it and drop its watch; the caller fails `done` and frees the context.
inline void unsend(OpBase* op) {
  untrack(op->h, op);
  drop_watch(op->h, op->watch);
  op->watch = nullptr;
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

// Every request in flight is linked into its handle's list, so that one the
// C client never completes (zookeeper_close drops requests still queued) is
// failed with ZCLOSING and freed by Handle::~Handle: each callback runs once.
// `Fail(ctx, rc)` fails the context's `done`.
template <auto Fail, class Ctx>
void track(Handle* h, Ctx* ctx) {
  ctx->closing = [](OpBase* op) {
    auto* c = static_cast<Ctx*>(op);
    call_safely(c->impl, [&] { Fail(*c, ZCLOSING); });
    unsend(c);
    delete c;
  };
  ctx->published.store(true, std::memory_order_release);
  link_pending(h, ctx);
}

// Links `ctx`, then `send(ctx)` passes it to one zoo_a* call. Returns the
// call's code; on non-ZOK the context is unlinked again and still the
// caller's (to fail and free).
template <auto Fail, class Ctx, class Send>
int send_tracked(Handle* h, Ctx* ctx, Send&& send) {
  track<Fail>(h, ctx);
  const int rc = send(ctx);
  if (rc != ZOK) unsend(ctx);
  return rc;
}

// Common prologue of every completion: the validity bound, dropping a watch
// the server did not register. Only writes are `committed` evidence: a
// follower answers reads from its own copy, even one cut off from the
// leader, and a deposed leader answers a sync at once, so no read
// proves anything about the session.
template <class Ctx>
std::unique_ptr<Ctx> begin_completion(const void* data, int rc, bool watch_registered, bool write = false) {
  std::unique_ptr<Ctx> ctx(static_cast<Ctx*>(const_cast<void*>(data)));
  (void)ctx->published.load(std::memory_order_acquire);  // see OpBase::published
  untrack(ctx->h, ctx.get());
  if (server_answered(rc)) ctx->h->note_answer();
  if (write && quorum_committed(rc)) ctx->impl->note_committed(ctx->h, ctx->sent, ctx->connection);
  if (!watch_registered) drop_watch(ctx->h, ctx->watch);
  else if (ctx->watch != nullptr) settle_abandoned(ctx->h, ctx->watch, ctx->watch_id);
  return ctx;
}

// Epilogue of every completion: `done` once, as a callback of the session.
template <class Ctx, class... V>
void finish(std::unique_ptr<Ctx> c, int rc, V&&... values) noexcept {
  CallbackScope scope(c->h->epoch);
  call_safely(c->impl, [&] { c->done(Status{rc}, std::forward<V>(values)...); });
}

// The whole completion of a read (whose watch, if any, the server registered
// when `watch_registered`), or of a write: evidence when committed.
template <class Ctx, class... V>
void complete_read(const void* data, int rc, bool watch_registered, V&&... values) noexcept {
  finish(begin_completion<Ctx>(data, rc, watch_registered), rc, std::forward<V>(values)...);
}
template <class Ctx, class... V>
void complete_write(const void* data, int rc, V&&... values) noexcept {
  finish(begin_completion<Ctx>(data, rc, false, true), rc, std::forward<V>(values)...);
}

// Fails a request's `done`: `rc` and every other argument value-initialized.
template <class... R>
void fail_done(const std::function<void(Status, R...)>& done, int rc) {
  done(Status{rc}, std::decay_t<R>{}...);
}
template <class Ctx>
void fail_op(Ctx& ctx, int rc) {
  fail_done(ctx.done, rc);
}

// One request. `send(zh, ctx, watch)` makes one zoo_a* call with `ctx` as its
// data (and `watch` as its watcher, if it takes one) whose completion ends as
// above, and returns its code; it must not read `ctx` (see OpBase::published).
// `watch` is armed only if the request is issued. `session`: see
// Client::Impl::issue (kAnySession, or the one epoch it may go out on).
template <class Ctx, class Send>
void send_op(Client::Impl* impl, std::uint64_t session, typename Ctx::done_type done, Watcher watch, Send send,
             typename Ctx::extra_type extra = {}) {
  auto* ctx = new Ctx{{impl}, std::move(done), std::move(extra)};
  const int rc = impl->issue([&](zhandle_t* zh, Handle* h) {
    ctx->h = h;
    ctx->sent = Clock::now();
    ctx->connection = h->connection.load();
    ctx->watch = arm_watch(h, std::move(watch));
    ctx->watch_id = ctx->watch ? ctx->watch->id : 0;
    const ArmedWatch armed{ctx->watch ? watch_trampoline : nullptr, ctx->watch};
    return send_tracked<fail_op<Ctx>>(h, ctx, [&](Ctx* c) { return send(zh, c, armed); });
  }, session);
  if (rc == ZOK) return;  // the completion owns `ctx` now (and may have freed it)
  std::unique_ptr<Ctx> refused(ctx);
  const auto ep = session != Client::Impl::kAnySession ? session : impl->epoch();
  impl->defer([done = std::move(refused->done), rc, ep] {
    CallbackScope scope(ep);
    fail_done(done, rc);
  });
}

}  // namespace zklock
