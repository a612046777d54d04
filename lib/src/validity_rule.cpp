// The validity rule (validity_rule.hpp): the chain i, j, k of committed writes, and which answers to keep.
#include "validity_rule.hpp"

#include <algorithm>

namespace zklock::detail {

using namespace std::chrono_literals;

RuleClock::duration ValidityParams::heartbeat_period() const {
  const auto room = timeout - margin - ping_gap();
  return std::max<RuleClock::duration>(room / 4, 10ms);
}

bool ValidityParams::usable() const {
  return timeout > RuleClock::duration::zero() && tick > RuleClock::duration::zero() &&
         timeout - margin >= 2 * ping_gap();
}

void ValidityRule::reset(ValidityParams p) {
  p_ = p;
  have_connection_ = false;
  connection_ = 0;
  kept_.clear();
  latest_.reset();
}

std::optional<ValidityRule::time_point> ValidityRule::committed(std::uint64_t connection, time_point sent,
                                                                time_point answered) {
  if (!have_connection_ || connection != connection_) {
    kept_.clear();
    latest_.reset();
    have_connection_ = true;
    connection_ = connection;
  }
  if (!p_.usable()) return std::nullopt;
  // This answer as k: j is the latest-sent kept answer that came back before
  // k was sent; i, the latest-sent one answered a ping gap before j was sent.
  std::optional<time_point> tj;
  for (const auto& a : kept_) {
    if (a.answered <= sent && (!tj || a.sent > *tj)) tj = a.sent;
  }
  std::optional<time_point> ti;
  if (tj) {
    for (const auto& a : kept_) {
      if (a.answered + p_.ping_gap() <= *tj && (!ti || a.sent > *ti)) ti = a.sent;
    }
  }
  if (!latest_ || sent > *latest_) latest_ = sent;
  // Kept for later chains (as i or j), unless one kept is within
  // (timeout − margin)/64: dropping an answer only ever loses evidence, and
  // one so close to a kept one would raise a later bound by no more than that.
  const auto spacing = std::max<RuleClock::duration>((p_.timeout - p_.margin) / 64, 1ms);
  const auto at = std::upper_bound(kept_.begin(), kept_.end(), sent,
                                   [](time_point t, const Answer& a) { return t < a.sent; });
  const bool crowded = (at != kept_.begin() && sent - std::prev(at)->sent < spacing) ||
                       (at != kept_.end() && at->sent - sent < spacing);
  if (!crowded) kept_.insert(at, Answer{sent, answered});
  // An answer sent before the i just used can only prove an older bound, as
  // i and as j alike.
  while (ti && !kept_.empty() && kept_.front().sent < *ti) kept_.pop_front();
  while (kept_.size() > kMaxKept) kept_.pop_front();
  if (!ti) return std::nullopt;
  return *ti + p_.timeout - p_.margin;
}

std::optional<ValidityRule::time_point> ValidityRule::latest_sent() const { return latest_; }

}  // namespace zklock::detail
