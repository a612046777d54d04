// A session whose connections keep closing before any answer: the rule that calls it a reconnect loop.
//
// The C client re-validates a session on every handshake, so a session whose
// connections the server keeps closing (3.8's one SetWatches packet larger
// than jute.maxbuffer is one cause) never expires: it keeps its ephemeral
// nodes and watches nothing, for as long as the process runs. This is the
// pure half of noticing it (no I/O; time is an input); Client::Impl feeds it
// from the completion thread (reconnect_loop.cpp) and ends the session.
#pragma once

#include <chrono>
#include <cstdint>

#include "clock.hpp"

namespace zklock::detail {

// The rule (docs/operations.md, "A reconnect loop"): a session is looping
// once kMinConnections or more consecutive connections of it each closed
// before any request of ours was answered on it, and within a third of
// `bound` of their handshake, and the first of them was established at least
// `bound` ago; Client::Impl passes the negotiated session timeout. Why that
// long: the validity bound grows only on answers (committed writes), so by
// then it has passed and every lease of the session was already reported
// lost; ending the session takes nothing more from its holders. Why several
// connections too: a server restart or a network blip cuts one connection,
// not three in a row. Why short-lived ones only: a connection that stayed
// up for a third of the timeout was not refused; it carried no answer only
// because nothing was asked (an idle session whose heartbeat is off), and
// a rolling restart of such a session's servers is no loop. A refused one
// closes within milliseconds of its handshake.
//
// Invariant: streak() counts the short unanswered connections since the last
// connection that was answered or long-lived; since() is when the first of
// them was established.
class ReconnectLoop {
 public:
  static constexpr std::uint32_t kMinConnections = 3;
  static constexpr int kShortDivisor = 3;  // "short-lived": closed within bound / 3 of its handshake

  // A connection established at `began` closed at `now`; `answered`: some
  // request of ours was answered on it. True exactly once per streak: the
  // first time the rule holds.
  bool ended(bool answered, Clock::time_point began, Clock::time_point now, std::chrono::milliseconds bound) {
    if (answered || now - began >= bound / kShortDivisor) {
      streak_ = 0;
      reported_ = false;
      return false;
    }
    if (streak_++ == 0) since_ = began;
    if (reported_ || streak_ < kMinConnections || now - since_ < bound) return false;
    reported_ = true;
    return true;
  }
  std::uint32_t streak() const { return streak_; }
  Clock::time_point since() const { return since_; }

 private:
  std::uint32_t streak_ = 0;
  Clock::time_point since_{};
  bool reported_ = false;
};

}  // namespace zklock::detail
