// Noticing a reconnect loop (reconnect_loop.hpp) and saying so: one log line, a counter, the observer.
#include <utility>

#include "client_impl.hpp"

namespace zklock {

// Completion thread. Runs at the session event that closes a connection, so
// every answer given on that connection has already been noted
// (Handle::answered_on): the C client queues answers and events in order.
bool Client::Impl::connection_closed(Handle* h) {
  const auto ended = std::exchange(h->live_connection, 0);
  if (ended == 0 || closing_) return false;  // no connection was up since the last close
  const bool answered = h->answered_on.load(std::memory_order_relaxed) == ended;
  const auto now = Clock::now();
  const auto bound = negotiated();
  if (!h->loop.ended(answered, h->live_since, now, bound)) return false;

  h->abandoned.store(true);
  reconnect_loops_.fetch_add(1);
  std::size_t watches = 0;
  {
    std::lock_guard lk(h->watches_mu);
    watches = h->watches.size();
  }
  // The one cause known to do this: 3.8's C client re-arms every watch of the
  // session in one SetWatches packet right after the handshake, and a server
  // closes any connection whose packet exceeds its jute.maxbuffer. Without
  // watches no such packet is sent, and the cause is elsewhere.
  const std::string cause =
      watches > 0 ? fmt::format("connections close right after the handshake: the server may refuse the one "
                                "SetWatches packet that re-arms this session's {} watches, larger than its "
                                "jute.maxbuffer",
                                watches)
                  : std::string("the session has no watches to re-arm, so not its SetWatches packet: see the "
                                "servers' logs for why they close its connections");
  const auto over = std::chrono::duration_cast<std::chrono::milliseconds>(now - h->loop.since()).count();
  const auto id = session_id();
  log->error("zookeeper session 0x{:x} is in a reconnect loop: its last {} connections, over {} ms, each closed "
             "before any request was answered; {}. Ending it (every lease of it is lost; the server removes its "
             "ephemeral nodes within {} ms) and starting a new session (docs/operations.md, \"A reconnect loop\")",
             id, h->loop.streak(), over, cause, bound.count());
  if (opts.observer) {
    post_user([observer = opts.observer, log = log, id, cause] {
      try {
        observer->reconnect_loop(id, cause);
      } catch (const std::exception& e) {
        log->error("lock observer threw: {}", e.what());
      } catch (...) {
        log->error("lock observer threw");
      }
    });
  }
  return true;
}

}  // namespace zklock
