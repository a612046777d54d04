// Handle: one zhandle_t, owned (closed exactly once), and the requests and watches that hang off it.
#pragma once

#include <zookeeper/zookeeper.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <unordered_set>

#include "clock.hpp"
#include "reconnect_loop.hpp"
#include "zklock/client.hpp"

namespace zklock {

struct OpBase;
struct WatchCtx;

// The deleter of a zhandle_t. zookeeper_close may block (it sends
// closeSession) and runs the pending completions with ZCLOSING, which take
// zklock's locks: a ZhandlePtr is reset outside every lock.
struct ZhandleCloser {
  void operator()(zhandle_t* zh) const noexcept { zookeeper_close(zh); }
};
using ZhandlePtr = std::unique_ptr<zhandle_t, ZhandleCloser>;

// One zhandle_t (one session) and what hangs off it. The Impl owns the
// current one through a std::unique_ptr and destroys a replaced one outside
// every lock (client_impl.hpp, invariant 1). Its C-client callbacks receive a
// Handle*, which lives until every one of them has run: the destructor closes
// the zhandle_t first (async_op.cpp).
struct Handle {
  Handle(Client::Impl* owner, std::uint64_t session_epoch) : impl(owner), epoch(session_epoch) {}
  // Closes the zhandle_t, then fails once with ZCLOSING every request the C
  // client dropped without completing it, then frees the watch contexts.
  ~Handle();
  Handle(const Handle&) = delete;
  Handle& operator=(const Handle&) = delete;

  ZhandlePtr zh;  // set once, before any callback can run (Impl::open_handle)
  Client::Impl* const impl;
  const std::uint64_t epoch;
  bool connected_once = false;  // completion thread only
  // Counts the session events seen on this handle (completion thread). Every
  // change of connection, to another server or the same one, passes through
  // one; the C client queues it ahead of every answer on the new connection.
  // So a request issued at count c and answered at count c was sent and
  // answered on one connection. (zoo_get_current_server() cannot tell: it
  // returns a static buffer the C client's I/O threads all write, and with
  // many clients in a process a read can be garbled, ZOOKEEPER-4810.)
  std::atomic<std::uint64_t> connection{0};
  // The connection count at the latest answer a server gave to a request of
  // ours (async_op.hpp, begin_completion): equal to the count of a connection
  // that just closed iff that connection carried an answer. Stored by the
  // completion thread, where session events also run, so the order is exact;
  // relaxed, one store per answer.
  std::atomic<std::uint64_t> answered_on{0};
  void note_answer() noexcept {
    answered_on.store(connection.load(std::memory_order_relaxed), std::memory_order_relaxed);
  }
  // The connection now established (its count; 0 between connections), since
  // when, and the loop rule fed at each close (completion thread only).
  std::uint64_t live_connection = 0;
  Clock::time_point live_since{};
  detail::ReconnectLoop loop;
  // Set once this session is ended for a reconnect loop (reconnect_loop.cpp):
  // its later events are ignored and no request goes out on it any more
  // (Client::Impl::issue answers ZSESSIONEXPIRED) until it is replaced.
  std::atomic<bool> abandoned{false};
  const Clock::time_point started = Clock::now();
  std::mutex watches_mu;
  std::unordered_set<WatchCtx*> watches;  // GUARDED_BY(watches_mu)
  // Requests in flight, linked through their contexts (OpBase::prev/next):
  // each is failed with ZCLOSING and freed if the C client drops it at close.
  OpBase* pending = nullptr;       // GUARDED_BY(watches_mu)
  std::size_t pending_count = 0;  // GUARDED_BY(watches_mu)
};

}  // namespace zklock
