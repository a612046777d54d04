// FencingToken: the proof of acquisition that the protected resource checks.
//
// A token names the ZooKeeper transaction that created the granted lock
// node (its czxid), which lease of that node it is (its lease ordinal) and
// the ensemble that issued it. Tokens order as the pair (czxid, ordinal):
// the czxid first. For one lock every lease has a larger token than every
// earlier one: a grant to another holder is a later node (FIFO grant order
// equals creation order, and ZooKeeper's zxid is a 64-bit counter that only
// grows), and a local re-take of a retained node is the same node with the
// next ordinal (0 for the node's first grant, n for its n-th re-take). So no
// two leases carry the same token, and a write of a released lease is
// refused once a later lease has written. The node's sequence number is
// carried for display only: it restarts when an emptied container parent is
// reaped and saturates on ZooKeeper 3.8.0, so it never orders.
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
#include <utility>

namespace zklock {

class FencingToken {
 public:
  FencingToken() = default;
  // REQUIRES czxid >= 0 and ordinal >= 0.
  FencingToken(std::string ensemble_id, std::int64_t czxid, std::int32_t sequence = 0, std::int64_t ordinal = 0);

  // Parses the text form "<ensemble-id>:<czxid>" (ordinal 0) or
  // "<ensemble-id>:<czxid>.<ordinal>" (ordinal 1 and up), both numbers in
  // decimal. Throws Error (Errc::invalid_argument) on anything else: empty
  // parts, a non-UUID ensemble id, a sign, leading zeros, non-digits,
  // overflow, an explicit ".0" (one spelling per token).
  static FencingToken parse(std::string_view text);
  // As parse(), but returns nullopt instead of throwing.
  static std::optional<FencingToken> try_parse(std::string_view text) noexcept;

  const std::string& ensemble_id() const noexcept { return ensemble_id_; }
  std::int64_t czxid() const noexcept { return czxid_; }
  // The lease ordinal: 0 for the node's first grant, n for its n-th local
  // re-take. A token written before ordinals existed parses with 0.
  std::int64_t ordinal() const noexcept { return ordinal_; }
  // This token with another ordinal (the same node's other lease).
  FencingToken with_ordinal(std::int64_t ordinal) const& { return FencingToken(*this).with_ordinal(ordinal); }
  FencingToken with_ordinal(std::int64_t ordinal) && {
    ordinal_ = ordinal;
    return std::move(*this);
  }
  // Queue position at creation, for display. Never use it to order tokens.
  std::int32_t sequence() const noexcept { return sequence_; }
  bool empty() const noexcept { return ensemble_id_.empty(); }

  // "<ensemble-id>:<czxid>", with ".<ordinal>" appended when the ordinal is
  // not 0. The sequence is not part of the text form.
  std::string str() const;

  // less/greater/equivalent by (czxid, ordinal), lexicographically, when
  // both come from the same ensemble; unordered when the ensembles differ
  // (or either token is empty).
  friend std::partial_ordering operator<=>(const FencingToken& a, const FencingToken& b) noexcept;
  friend bool operator==(const FencingToken& a, const FencingToken& b) noexcept;

 private:
  std::string ensemble_id_;
  std::int64_t czxid_ = 0;
  std::int32_t sequence_ = 0;
  std::int64_t ordinal_ = 0;
};

// True when `text` is a canonical lower-case UUID (8-4-4-4-12 hex digits).
bool is_uuid(std::string_view text) noexcept;

}  // namespace zklock
