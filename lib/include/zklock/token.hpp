// FencingToken: the proof of acquisition that the protected resource checks.
//
// A token names the ZooKeeper transaction that created the granted lock
// node (its czxid) and the ensemble that issued it. For one lock, tokens
// never decrease in grant order, and a grant to another holder always has a
// larger one: FIFO grant order equals creation order, and ZooKeeper's zxid
// is a 64-bit counter that only grows. Successive holds of one retained
// node inside one process (local re-takes) share its token: release only
// after your writes completed, as with any mutex (docs/fencing.md). The
// node's sequence number is carried for display only: it restarts when an
// emptied container parent is reaped and saturates on ZooKeeper 3.8.0, so
// it never orders.
//
// Tokens from different ensembles are unordered: compare() says so and a
// resource must reject the write (see docs/fencing.md).
//
// Thread-safety: a value type; const methods are safe to call concurrently.
#pragma once

#include <compare>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace zklock {

class FencingToken {
 public:
  FencingToken() = default;
  FencingToken(std::string ensemble_id, std::int64_t czxid, std::int32_t sequence = 0);

  // Parses the text form "<ensemble-id>:<czxid in decimal>". Throws Error
  // (Errc::invalid_argument) on anything else: empty parts, a non-UUID
  // ensemble id, a sign, leading zeros, non-digits, overflow.
  static FencingToken parse(std::string_view text);
  // As parse(), but returns nullopt instead of throwing.
  static std::optional<FencingToken> try_parse(std::string_view text) noexcept;

  const std::string& ensemble_id() const noexcept { return ensemble_id_; }
  std::int64_t czxid() const noexcept { return czxid_; }
  // Queue position at creation, for display. Never use it to order tokens.
  std::int32_t sequence() const noexcept { return sequence_; }
  bool empty() const noexcept { return ensemble_id_.empty(); }

  // "<ensemble-id>:<czxid>". The sequence is not part of the text form.
  std::string str() const;

  // less/greater/equivalent by czxid when both come from the same ensemble;
  // unordered when the ensembles differ (or either token is empty).
  friend std::partial_ordering operator<=>(const FencingToken& a, const FencingToken& b) noexcept;
  friend bool operator==(const FencingToken& a, const FencingToken& b) noexcept;

 private:
  std::string ensemble_id_;
  std::int64_t czxid_ = 0;
  std::int32_t sequence_ = 0;
};

// True when `text` is a canonical lower-case UUID (8-4-4-4-12 hex digits).
bool is_uuid(std::string_view text) noexcept;

}  // namespace zklock
