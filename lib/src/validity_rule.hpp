// The validity rule: which committed writes of a session prove how long it lives. Pure: no I/O, no clock.
//
// The proof is in docs/design.md ("Loss and the validity bound"); in short:
// let i, j, k be writes of this session, each answered on one connection
// with a code the leader's quorum committed (quorum_committed, async_op.hpp),
// with
//     j sent at least ping_gap() after i was answered, and
//     k sent after j was answered.
// Then the leader that committed them had received our server's touch for i
// (sent at t_i) before it prepared k, so it cannot expire the session before
// t_i + timeout; a later leader starts every session afresh after k. The
// bound is t_i + timeout − margin for the latest such t_i.
//
// Reasons, briefly: our server touched the session for i before answering
// it; the leader pings our server at least every ping_gap(), so it pinged it
// after i was answered and before it received j; our server answered that
// ping — carrying the touch — before the commit of j that made it answer j;
// k left our server after that answer, behind the ping reply on the one
// stream to the leader; the leader committed k, so it had read the reply.
//
// The touch takes effect only if the leader had not yet taken the session
// off its expiry queue: 3.8.0's expiry thread polls the expired sessions and
// marks them closing afterwards, and a touch or a write in between passes
// although the session is closed anyway. So a chain also needs an anchor:
//   held       k was answered before the bound already proven passed: every
//              leader polls the session only after that bound (plus the
//              margin), so the touch for i, applied before k, came earlier;
//   confirmed  a later write of this connection, sent at least
//              expiry_stall() after k was answered, was committed too: had
//              the leader polled the session before the touch for i, it would
//              have marked it closing before preparing that write.
// Without a bound proven (the first one comes from the session's creation),
// or once it has passed, only the second can raise it again.
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <optional>

namespace zklock::detail {

using RuleClock = std::chrono::steady_clock;

// What the rule needs to know about the session and the ensemble.
struct ValidityParams {
  RuleClock::duration timeout{};  // the negotiated session timeout
  RuleClock::duration tick{};     // the ensemble's tickTime
  RuleClock::duration margin{};   // subtracted for clock-rate error

  // The longest gap between two pings of a leader to one follower, as our
  // clock measures it: tickTime/2 (Leader.lead's loop) plus half as much
  // again for the loop's own work, the leader's thread scheduling and the
  // clocks' rate error.
  RuleClock::duration ping_gap() const { return tick * 3 / 4; }
  // The heartbeat period P. The bound at any instant is at most
  // ping_gap + 3 P + 3 round trips old (a chain waits up to P for each of j
  // and k, and up to P for its i); a quarter of what the margin leaves after
  // the ping gap keeps that below timeout − margin with room for round trips
  // of (timeout − margin − ping_gap)/12 each.
  RuleClock::duration heartbeat_period() const;
  // The longest the leader's expiry thread takes from polling a session off
  // its expiry queue to marking it closing (SessionTrackerImpl.run), as our
  // clock measures it: a quarter tick, the scheduling allowance ping_gap()
  // also grants the leader. A confirmed chain (above) rests on it; a held
  // one does not.
  RuleClock::duration expiry_stall() const { return tick / 4; }
  // False when the timeout is too short for the rule to keep a bound ahead
  // of the present (timeout − margin < 2 ping gaps = 1.5 × tickTime):
  // validity is refused.
  bool usable() const;
};

class ValidityRule {
 public:
  using time_point = RuleClock::time_point;

  explicit ValidityRule(ValidityParams p = {}) : p_(p) {}
  // A new session, or new settings: every kept answer is forgotten.
  void reset(ValidityParams p);
  const ValidityParams& params() const { return p_; }

  // A write of our session, issued at `sent` on connection `connection`,
  // answered at `answered` with a quorum-committed code; `bound` is the bound
  // the caller holds (proven before this answer), if any. Returns the bound
  // the answers kept so far prove (the caller keeps the largest), or nothing.
  // An answer on another connection than the kept ones starts over: our new
  // server's touches travel on another stream.
  std::optional<time_point> committed(std::uint64_t connection, time_point sent, time_point answered,
                                      std::optional<time_point> bound);

  // The latest send time of a committed write on the current connection: a
  // heartbeat is due a period after it.
  std::optional<time_point> latest_sent() const;
  std::size_t kept() const { return kept_.size(); }

  // At most this many answers are kept, at least (timeout − margin)/64
  // apart: one and a half times the longest a chain can span.
  static constexpr std::size_t kMaxKept = 96;

 private:
  struct Answer {
    time_point sent, answered;
  };
  // A chain that was not held and awaits its confirming write: its k's
  // answer and its t_i.
  struct Pending {
    time_point k_answered, ti;
  };
  ValidityParams p_;
  bool have_connection_ = false;
  std::uint64_t connection_ = 0;
  std::deque<Answer> kept_;  // ordered by `sent`
  // In answer order, each with a larger ti than the one before: no entry is
  // both confirmed later and worth less than another.
  std::deque<Pending> pending_;
  std::optional<time_point> latest_;  // of every committed answer on connection_, kept or not
};

}  // namespace zklock::detail
