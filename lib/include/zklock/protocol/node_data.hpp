// The data stored in every lock node (owner, host, pid, mode, priority): its JSON codec.
//
// Protocol module (zklock/protocol/): for zklock's own tools (detector, CLI)
// and for clients in other languages, not for applications, whose API is
// the headers directly in zklock/.
//
// Compact JSON, at most 256 bytes, written once at create and never changed
// (docs/protocol.md).
//   {"owner":"host/123/7","host":"host","pid":123,"mode":"exclusive","priority":0,
//    "description":"nightly invoice run","gives_up_after_ms":5000}
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "zklock/protocol/node_name.hpp"

namespace zklock::protocol {

inline constexpr std::size_t kMaxNodeDataBytes = 256;

struct NodeData {
  std::string owner;
  std::string host;
  std::int64_t pid = 0;
  Mode mode = Mode::exclusive;
  int priority = 0;
  std::string description;  // optional; empty means absent
  // The acquisition's timeout: it stops waiting at most this long after the
  // node's creation (its ctime, the server's clock; the timer starts before
  // the create is sent). 0: no timeout, the field is absent and the node
  // waits until granted or cancelled. Past it (and a clock-skew allowance)
  // a node still waiting is an abandoned wait the detector does not count.
  std::int64_t gives_up_after_ms = 0;
};

// Encodes compactly. An over-long description is truncated (at a UTF-8
// boundary) to fit; if owner and host alone do not fit, throws Error
// (Errc::invalid_argument).
std::string encode_node_data(const NodeData& data);

// Decodes; nullopt for malformed, oversized or incomplete data (never throws).
std::optional<NodeData> decode_node_data(std::string_view bytes) noexcept;

}  // namespace zklock::protocol
