// FencingToken: its text form "<ensemble-id>:<zxid>", parsing, and order by zxid within an ensemble.
#include "zklock/token.hpp"

#include <charconv>

#include "zklock/error.hpp"

namespace zklock {

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

FencingToken::FencingToken(std::string ensemble_id, std::int64_t czxid, std::int32_t sequence)
    : ensemble_id_(std::move(ensemble_id)), czxid_(czxid), sequence_(sequence) {}

std::optional<FencingToken> FencingToken::try_parse(std::string_view text) noexcept {
  const auto colon = text.find(':');
  if (colon == std::string_view::npos) return std::nullopt;
  const auto id = text.substr(0, colon);
  const auto num = text.substr(colon + 1);
  if (!is_uuid(id) || num.empty() || num.size() > 19) return std::nullopt;
  if (num.size() > 1 && num[0] == '0') return std::nullopt;  // one spelling per token
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(num.data(), num.data() + num.size(), value);
  if (ec != std::errc() || end != num.data() + num.size() || value < 0) return std::nullopt;
  if (num[0] < '0' || num[0] > '9') return std::nullopt;  // from_chars accepts '-'
  return FencingToken(std::string(id), value);
}

FencingToken FencingToken::parse(std::string_view text) {
  if (auto t = try_parse(text)) return *t;
  std::string shown(text.substr(0, 80));
  throw Error(Errc::invalid_argument,
              "malformed fencing token '" + shown +
                  "': expected <ensemble-uuid>:<czxid>, e.g. "
                  "0b6f6a52-4f0e-4c55-9d7e-3f1f2d9c1a10:4294967302");
}

std::string FencingToken::str() const { return ensemble_id_ + ":" + std::to_string(czxid_); }

std::partial_ordering operator<=>(const FencingToken& a, const FencingToken& b) noexcept {
  if (a.empty() || b.empty() || a.ensemble_id_ != b.ensemble_id_) {
    return std::partial_ordering::unordered;
  }
  return a.czxid_ <=> b.czxid_;
}

bool operator==(const FencingToken& a, const FencingToken& b) noexcept {
  return !a.empty() && a.ensemble_id_ == b.ensemble_id_ && a.czxid_ == b.czxid_;
}

}  // namespace zklock
