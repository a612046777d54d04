// SHA-1 and base64, only for ZooKeeper digest ACL ids
// ("user:base64(sha1(user:password))"). Not for anything security-critical
// beyond what ZooKeeper's digest scheme itself offers.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace zklock {
std::array<std::uint8_t, 20> sha1(std::string_view bytes);
std::string base64(const std::array<std::uint8_t, 20>& bytes);
}  // namespace zklock
