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
  // answered at `answered` with a quorum-committed code. Returns the bound
  // the answers kept so far prove (the caller keeps the largest), or nothing.
  // An answer on another connection than the kept ones starts over: our new
  // server's touches travel on another stream.
  std::optional<time_point> committed(std::uint64_t connection, time_point sent, time_point answered);

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
  ValidityParams p_;
  bool have_connection_ = false;
  std::uint64_t connection_ = 0;
  std::deque<Answer> kept_;  // ordered by `sent`
  std::optional<time_point> latest_;  // of every committed answer on connection_, kept or not
};

}  // namespace zklock::detail
