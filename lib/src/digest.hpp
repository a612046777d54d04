// Internal: SHA-1 and base64, only for ZooKeeper digest ACL ids.
//
// An id is "user:base64(sha1(user:password))". Not for anything security-critical
// beyond what ZooKeeper's digest scheme itself offers. Both come from
// OpenSSL's libcrypto (digest.cpp); zklock implements no cryptography.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>

namespace zklock {
// Throws Error(io_error) only if libcrypto refuses SHA-1.
std::array<std::uint8_t, 20> sha1(std::string_view bytes);
// Standard base64 (RFC 4648 alphabet, '=' padding, no line breaks).
std::string base64(const std::array<std::uint8_t, 20>& bytes);
}  // namespace zklock
