// Lock node names: owner keys, the name parser and builder, GUIDs, sequence order.
#include "zklock/protocol/node_name.hpp"

#include <charconv>
#include <cstdio>
#include <random>

namespace zklock {
namespace {

bool is_lower_hex(std::string_view s) noexcept {
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

std::string to_hex64(std::uint64_t v) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return std::string(buf, 16);
}

}  // namespace

std::string_view mode_name(Mode m) noexcept { return m == Mode::shared ? "shared" : "exclusive"; }

namespace protocol {

std::uint64_t fnv1a64(std::string_view bytes) noexcept {
  std::uint64_t h = 0xcbf29ce484222325ULL;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::string owner_key(std::string_view owner_id) { return to_hex64(fnv1a64(owner_id)); }

std::optional<LockNodeName> parse_lock_node_name(std::string_view name) noexcept {
  // w_ + 16 + _ + 32 + _ + at least one digit
  constexpr std::size_t kFixed = 2 + 16 + 1 + 32 + 1;
  if (name.size() < kFixed + 1 || name.size() > kFixed + 11) return std::nullopt;
  if ((name[0] != 'w' && name[0] != 'r') || name[1] != '_') return std::nullopt;
  const auto key = name.substr(2, 16);
  const auto guid = name.substr(19, 32);
  if (name[18] != '_' || name[51] != '_' || !is_lower_hex(key) || !is_lower_hex(guid)) {
    return std::nullopt;
  }
  const auto suffix = name.substr(kFixed);
  const bool negative = suffix[0] == '-';
  const auto digits = negative ? suffix.substr(1) : suffix;
  if (digits.empty()) return std::nullopt;
  for (char c : digits) {
    if (c < '0' || c > '9') return std::nullopt;
  }
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (ec != std::errc() || end != digits.data() + digits.size()) return std::nullopt;
  if (negative) value = -value;
  if (value < INT32_MIN || value > INT32_MAX) return std::nullopt;

  LockNodeName out;
  out.mode = name[0] == 'r' ? Mode::shared : Mode::exclusive;
  out.owner_key = std::string(key);
  out.guid = std::string(guid);
  out.sequence = static_cast<std::int32_t>(value);
  out.name = std::string(name);
  return out;
}

std::string lock_node_prefix(Mode mode, std::string_view key, std::string_view guid) {
  std::string s;
  s.reserve(2 + key.size() + 1 + guid.size() + 1);
  s += mode == Mode::shared ? "r_" : "w_";
  s += key;
  s += '_';
  s += guid;
  s += '_';
  return s;
}

std::string new_guid() {
  // One generator per thread, seeded from the OS: GUIDs only need to be
  // unique, not secret.
  thread_local std::mt19937_64 gen([] {
    std::random_device rd;
    std::seed_seq seq{rd(), rd(), rd(), rd(), rd(), rd()};
    return std::mt19937_64(seq);
  }());
  return to_hex64(gen()) + to_hex64(gen());
}

int compare_sequence(std::int32_t a, std::int32_t b) noexcept {
  const auto diff = static_cast<std::int32_t>(static_cast<std::uint32_t>(a) - static_cast<std::uint32_t>(b));
  return diff < 0 ? -1 : (diff > 0 ? 1 : 0);
}

}  // namespace protocol
}  // namespace zklock
