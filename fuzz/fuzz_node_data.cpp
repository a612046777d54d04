// libFuzzer: decode_node_data over arbitrary lock node data.
//
// Node data is written by whoever created the node; readers (the detector,
// the CLI) must survive anything. Properties: never crashes or throws; what
// decodes re-encodes (within the size limit) and decodes to the same fields.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "zklock/error.hpp"
#include "zklock/protocol/node_data.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto decoded = zklock::protocol::decode_node_data(input);
  if (!decoded) return 0;
  if (size > zklock::protocol::kMaxNodeDataBytes) std::abort();  // oversized data must be refused
  std::string again;
  try {
    again = zklock::protocol::encode_node_data(*decoded);
  } catch (const zklock::Error&) {
    return 0;  // owner and host alone too long once re-escaped: refused, not a crash
  }
  if (again.size() > zklock::protocol::kMaxNodeDataBytes) std::abort();
  const auto round = zklock::protocol::decode_node_data(again);
  if (!round) std::abort();
  if (round->owner != decoded->owner || round->host != decoded->host || round->pid != decoded->pid ||
      round->mode != decoded->mode || round->priority != decoded->priority)
    std::abort();
  return 0;
}
