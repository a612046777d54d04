// The lock node data's JSON codec: bounded to 256 bytes, and refusing malformed input.
#include "zklock/protocol/node_data.hpp"

#include <cstdint>

#include <nlohmann/json.hpp>

#include "json_int.hpp"
#include "zklock/error.hpp"

namespace zklock::protocol {
namespace {

nlohmann::json to_json(const NodeData& d) {
  nlohmann::json j = {{"owner", d.owner},
                      {"host", d.host},
                      {"pid", d.pid},
                      {"mode", std::string(mode_name(d.mode))},
                      {"priority", d.priority}};
  if (!d.description.empty()) j["description"] = d.description;
  if (d.gives_up_after_ms > 0) j["gives_up_after_ms"] = d.gives_up_after_ms;
  return j;
}

// Cuts `s` to at most `n` bytes without splitting a UTF-8 sequence.
void truncate_utf8(std::string& s, std::size_t n) {
  if (s.size() <= n) return;
  while (n > 0 && (static_cast<unsigned char>(s[n]) & 0xC0) == 0x80) --n;
  s.resize(n);
}

}  // namespace

std::string encode_node_data(const NodeData& data) {
  NodeData d = data;
  std::string out = to_json(d).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  while (out.size() > kMaxNodeDataBytes && !d.description.empty()) {
    const std::size_t over = out.size() - kMaxNodeDataBytes;
    truncate_utf8(d.description, d.description.size() > over ? d.description.size() - over : 0);
    out = to_json(d).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  }
  if (out.size() > kMaxNodeDataBytes) {
    throw Error(Errc::invalid_argument,
                "lock node data exceeds 256 bytes: owner id '" + data.owner.substr(0, 64) +
                    "...' is too long");
  }
  return out;
}

std::optional<NodeData> decode_node_data(std::string_view bytes) noexcept {
  if (bytes.empty() || bytes.size() > kMaxNodeDataBytes) return std::nullopt;
  try {
    auto j = nlohmann::json::parse(bytes);
    if (!j.is_object()) return std::nullopt;
    NodeData d;
    d.owner = j.at("owner").get<std::string>();
    d.host = j.value("host", "");
    std::int64_t pid = 0, priority = 0, gives_up_after = 0;
    if (!detail::read_int_field(j, "pid", 0, INT64_MAX, pid) ||
        !detail::read_int_field(j, "priority", INT32_MIN, INT32_MAX, priority) ||
        !detail::read_int_field(j, "gives_up_after_ms", 0, INT64_MAX, gives_up_after)) {
      return std::nullopt;
    }
    d.gives_up_after_ms = gives_up_after;
    d.pid = pid;
    const auto mode = j.value("mode", std::string("exclusive"));
    if (mode == "exclusive") d.mode = Mode::exclusive;
    else if (mode == "shared") d.mode = Mode::shared;
    else return std::nullopt;
    d.priority = static_cast<int>(priority);
    d.description = j.value("description", "");
    if (d.owner.empty()) return std::nullopt;
    return d;
  } catch (...) {
    return std::nullopt;
  }
}

}  // namespace zklock::protocol
