// CRC-32 (IEEE) of the fence gate's state file, computed by zlib.
#include "crc32.hpp"

#include <zlib.h>

namespace zklock {

std::uint32_t crc32(std::string_view data) noexcept {
  // crc32_z takes a z_size_t length, so no chunking at 4 GiB is needed.
  return static_cast<std::uint32_t>(
      ::crc32_z(::crc32_z(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(data.data()), data.size()));
}

}  // namespace zklock
