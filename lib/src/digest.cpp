#include "digest.hpp"

#include <vector>

namespace zklock {
namespace {
std::uint32_t rol(std::uint32_t v, int n) { return (v << n) | (v >> (32 - n)); }
}  // namespace

std::array<std::uint8_t, 20> sha1(std::string_view in) {
  std::uint32_t h[5] = {0x67452301, 0xEFCDAB89, 0x98BADCFE, 0x10325476, 0xC3D2E1F0};
  std::vector<std::uint8_t> msg(in.begin(), in.end());
  const std::uint64_t bit_len = static_cast<std::uint64_t>(in.size()) * 8;
  msg.push_back(0x80);
  while (msg.size() % 64 != 56) msg.push_back(0);
  for (int i = 7; i >= 0; --i) msg.push_back(static_cast<std::uint8_t>(bit_len >> (8 * i)));
  for (std::size_t chunk = 0; chunk < msg.size(); chunk += 64) {
    std::uint32_t w[80];
    for (int i = 0; i < 16; ++i) {
      w[i] = (std::uint32_t(msg[chunk + 4 * i]) << 24) | (std::uint32_t(msg[chunk + 4 * i + 1]) << 16) |
             (std::uint32_t(msg[chunk + 4 * i + 2]) << 8) | std::uint32_t(msg[chunk + 4 * i + 3]);
    }
    for (int i = 16; i < 80; ++i) w[i] = rol(w[i - 3] ^ w[i - 8] ^ w[i - 14] ^ w[i - 16], 1);
    std::uint32_t a = h[0], b = h[1], c = h[2], d = h[3], e = h[4];
    for (int i = 0; i < 80; ++i) {
      std::uint32_t f, k;
      if (i < 20) { f = (b & c) | (~b & d); k = 0x5A827999; }
      else if (i < 40) { f = b ^ c ^ d; k = 0x6ED9EBA1; }
      else if (i < 60) { f = (b & c) | (b & d) | (c & d); k = 0x8F1BBCDC; }
      else { f = b ^ c ^ d; k = 0xCA62C1D6; }
      const std::uint32_t t = rol(a, 5) + f + e + k + w[i];
      e = d; d = c; c = rol(b, 30); b = a; a = t;
    }
    h[0] += a; h[1] += b; h[2] += c; h[3] += d; h[4] += e;
  }
  std::array<std::uint8_t, 20> out{};
  for (int i = 0; i < 5; ++i) {
    for (int j = 0; j < 4; ++j) out[4 * i + j] = static_cast<std::uint8_t>(h[i] >> (24 - 8 * j));
  }
  return out;
}

std::string base64(const std::array<std::uint8_t, 20>& in) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  std::size_t i = 0;
  for (; i + 3 <= in.size(); i += 3) {
    const std::uint32_t v = (in[i] << 16) | (in[i + 1] << 8) | in[i + 2];
    out += kAlphabet[(v >> 18) & 63]; out += kAlphabet[(v >> 12) & 63];
    out += kAlphabet[(v >> 6) & 63]; out += kAlphabet[v & 63];
  }
  const std::size_t rest = in.size() - i;  // 20 % 3 == 2
  if (rest == 2) {
    const std::uint32_t v = (in[i] << 16) | (in[i + 1] << 8);
    out += kAlphabet[(v >> 18) & 63]; out += kAlphabet[(v >> 12) & 63]; out += kAlphabet[(v >> 6) & 63]; out += '=';
  } else if (rest == 1) {
    const std::uint32_t v = in[i] << 16;
    out += kAlphabet[(v >> 18) & 63]; out += kAlphabet[(v >> 12) & 63]; out += "==";
  }
  return out;
}

}  // namespace zklock
