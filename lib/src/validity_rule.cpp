// The validity rule (validity_rule.hpp): the chain i, j, k of committed writes, its anchor, and which answers to keep.
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
  pending_.clear();
  latest_.reset();
}

std::optional<ValidityRule::time_point> ValidityRule::committed(std::uint64_t connection, time_point sent,
                                                                time_point answered, std::optional<time_point> bound) {
  if (!have_connection_ || connection != connection_) {
    kept_.clear();
    pending_.clear();
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
  // Held: k came back before the proven bound passed, so before any leader
  // could poll the session. Otherwise this chain waits for its confirmation.
  const bool held = ti && bound && answered < *bound;
  // (A plain time_point and a flag: GCC 12 takes an optional compared in a
  // loop for uninitialized.)
  bool have = held;
  time_point proven_i = held ? *ti : time_point{};
  // This answer as the confirming write of the chains whose k came back at
  // least expiry_stall() before it was sent; the latest such has the
  // largest t_i.
  while (!pending_.empty() && pending_.front().k_answered + p_.expiry_stall() <= sent) {
    if (!have || pending_.front().ti > proven_i) proven_i = pending_.front().ti;
    have = true;
    pending_.pop_front();
  }
  if (ti && !held && (pending_.empty() || *ti > pending_.back().ti) && (!have || *ti > proven_i)) {
    pending_.push_back(Pending{answered, *ti});
  }
  while (have && !pending_.empty() && pending_.front().ti <= proven_i) pending_.pop_front();
  while (pending_.size() > kMaxKept) pending_.pop_front();
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
  // An answer sent before the i just proven can only prove an older bound,
  // as i and as j alike.
  while (have && !kept_.empty() && kept_.front().sent < proven_i) kept_.pop_front();
  while (kept_.size() > kMaxKept) kept_.pop_front();
  if (!have) return std::nullopt;
  return proven_i + p_.timeout - p_.margin;
}

std::optional<ValidityRule::time_point> ValidityRule::latest_sent() const { return latest_; }

}  // namespace zklock::detail
