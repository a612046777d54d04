// Internal: the CRC-32 of the fence gate's state file.
//
// CRC-32/ISO-HDLC (IEEE 802.3, reflected, polynomial 0xEDB88320, initial
// and final xor 0xFFFFFFFF), the checksum of zlib, gzip and PNG;
// "123456789" -> 0xCBF43926. Computed by zlib's crc32 (crc32.cpp); zklock
// keeps no checksum code of its own.
#pragma once

#include <cstdint>
#include <string_view>

namespace zklock {
std::uint32_t crc32(std::string_view data) noexcept;
}  // namespace zklock
