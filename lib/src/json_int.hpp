// Internal: reading integers from untrusted JSON, refusing what does not fit.
//
// nlohmann::json converts a number outside the target type's range with
// undefined behaviour (a double cast to int64) or silently truncates it;
// protocol decoders must refuse such data instead (found by fuzzing,
// tests/unit/parser_fuzz_regression_test.cpp).
#pragma once

#include <cstdint>

#include <nlohmann/json.hpp>

namespace zklock::detail {

// Leaves `out` unchanged and returns true when `key` is absent; returns false
// when it is present but not an integer within [lo, hi].
inline bool read_int_field(const nlohmann::json& j, const char* key, std::int64_t lo, std::int64_t hi,
                           std::int64_t& out) {
  if (!j.contains(key)) return true;
  const auto& v = j.at(key);
  if (v.is_number_unsigned()) {
    const auto u = v.get<std::uint64_t>();
    if (hi < 0 || u > static_cast<std::uint64_t>(hi)) return false;
    out = static_cast<std::int64_t>(u);
    return true;
  }
  if (!v.is_number_integer()) return false;
  const auto i = v.get<std::int64_t>();
  if (i < lo || i > hi) return false;
  out = i;
  return true;
}

}  // namespace zklock::detail
