// FencingToken: its text form "<ensemble-id>:<czxid>[.<ordinal>]", parsing, and order by (czxid, ordinal) within an ensemble.
#include "zklock/token.hpp"

#include <charconv>

#include "zklock/error.hpp"

namespace zklock {
namespace {

// A non-negative decimal int64 with no sign and no leading zeros (one
// spelling per value); nullopt otherwise.
std::optional<std::int64_t> parse_decimal(std::string_view num) noexcept {
  if (num.empty() || num.size() > 19) return std::nullopt;
  if (num[0] < '0' || num[0] > '9') return std::nullopt;  // from_chars accepts '-'
  if (num.size() > 1 && num[0] == '0') return std::nullopt;
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), value);
  if (ec != std::errc() || end != num.data() + num.size() || value < 0) return std::nullopt;
  return value;
}

}  // namespace

bool is_uuid(std::string_view s) noexcept {
  if (s.size() != 36) return false;
  for (std::size_t i = 0; i < s.size(); ++i) {
    const char c = s[i];
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (c != '-') return false;
    } else if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) {
      return false;
    }
  }
  return true;
}

FencingToken::FencingToken(std::string ensemble_id, std::int64_t czxid, std::int32_t sequence, std::int64_t ordinal)
    : ensemble_id_(std::move(ensemble_id)), czxid_(czxid), sequence_(sequence), ordinal_(ordinal) {}

std::optional<FencingToken> FencingToken::try_parse(std::string_view text) noexcept {
  const auto colon = text.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const auto id = text.substr(0, colon);
  auto num = text.substr(colon + 1);
  if (!is_uuid(id)) return std::nullopt;
  std::int64_t ordinal = 0;
  if (const auto dot = num.find('.'); dot != std::string_view::npos) {
    const auto o = parse_decimal(num.substr(dot + 1));
    if (!o || *o == 0) return std::nullopt;  // ordinal 0 is written without ".0"
    ordinal = *o;
    num = num.substr(0, dot);
  }
  const auto czxid = parse_decimal(num);
  if (!czxid) return std::nullopt;
  return FencingToken(std::string(id), *czxid, 0, ordinal);
}

FencingToken FencingToken::parse(std::string_view text) {
  if (auto t = try_parse(text)) return *t;
  std::string shown(text.substr(0, 80));
  throw Error(Errc::invalid_argument,
              "malformed fencing token '" + shown +
                  "': expected <ensemble-uuid>:<czxid>, e.g. "
                  "0b6f6a52-4f0e-4c55-9d7e-3f1f2d9c1a10:4294967302");
}

std::string FencingToken::str() const {
  auto text = ensemble_id_ + ":" + std::to_string(czxid_);
  if (ordinal_ != 0) text += "." + std::to_string(ordinal_);
  return text;
}

std::partial_ordering operator<=>(const FencingToken& a, const FencingToken& b) noexcept {
  if (a.empty() || b.empty() || a.ensemble_id_ != b.ensemble_id_) {
    return std::partial_ordering::unordered;
  }
  if (const auto c = a.czxid_ <=> b.czxid_; c != 0) return c;
  return a.ordinal_ <=> b.ordinal_;
}

bool operator==(const FencingToken& a, const FencingToken& b) noexcept {
  return !a.empty() && a.ensemble_id_ == b.ensemble_id_ && a.czxid_ == b.czxid_ && a.ordinal_ == b.ordinal_;
}

}  // namespace zklock
