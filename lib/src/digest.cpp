// SHA-1 and base64 for ZooKeeper digest ACL ids, from OpenSSL's libcrypto.
#include "digest.hpp"

#include <openssl/evp.h>

#include "zklock/error.hpp"

namespace zklock {

// Both from OpenSSL's libcrypto: zklock keeps no cryptography of its own.
std::array<std::uint8_t, 20> sha1(std::string_view in) {
  std::array<std::uint8_t, 20> out{};
  unsigned int len = 0;
  if (EVP_Digest(in.data(), in.size(), out.data(), &len, EVP_sha1(), nullptr) != 1 || len != out.size()) {
    // Only a libcrypto that refuses SHA-1 (a policy that disables it) gets here.
    throw Error(Errc::io_error, "OpenSSL's libcrypto refused to compute SHA-1 (EVP_Digest failed)");
  }
  return out;
}

std::string base64(const std::array<std::uint8_t, 20>& in) {
  // EVP_EncodeBlock writes 4 characters per started 3 bytes plus a NUL, with
  // '=' padding and no line breaks: 28 characters for 20 bytes.
  unsigned char buf[4 * ((20 + 2) / 3) + 1];
  const int n = EVP_EncodeBlock(buf, in.data(), static_cast<int>(in.size()));
  return std::string(reinterpret_cast<const char*>(buf), static_cast<std::size_t>(n));
}

}  // namespace zklock
