// libFuzzer: decode_revocation_record over arbitrary record data.
//
// A victim reads the record of its vanished node to learn why; anyone with
// write access to /zklock/revocations could have written it. Properties:
// never crashes or throws; what decodes re-encodes (within the size limit)
// to a record that decodes equal; the message helpers accept it.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "zklock/error.hpp"
#include "zklock/protocol/revocation.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto decoded = zklock::protocol::decode_revocation_record(input);
  if (!decoded) return 0;
  if (size > zklock::protocol::kMaxRevocationRecordBytes) std::abort();
  (void)zklock::protocol::cycle_text(*decoded);
  (void)zklock::protocol::revocation_message(*decoded);
  std::string again;
  try {
    again = zklock::protocol::encode_revocation_record(*decoded);
  } catch (const zklock::Error&) {
    return 0;  // grew past the limit once re-escaped: refused, not a crash
  }
  const auto round = zklock::protocol::decode_revocation_record(again);
  if (!round || !(*round == *decoded)) std::abort();
  return 0;
}
