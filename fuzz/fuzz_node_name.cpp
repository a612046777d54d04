// libFuzzer: parse_lock_node_name over arbitrary child names.
//
// Any client may create children under a lock path, so the recipe, the
// detector and the CLI all parse names they did not write. Properties:
// never crashes; a parsed name is exactly the input, and its parts are what
// docs/protocol.md says (16 and 32 lower-case hex digits); the name rebuilds
// from its parts.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "zklock/protocol/node_name.hpp"

namespace {

bool lower_hex(std::string_view s, std::size_t n) {
  if (s.size() != n) return false;
  for (char c : s) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto parsed = zklock::protocol::parse_lock_node_name(input);
  if (!parsed) return 0;
  if (parsed->name != input) std::abort();
  if (!lower_hex(parsed->owner_key, 16) || !lower_hex(parsed->guid, 32)) std::abort();
  const std::string prefix = zklock::protocol::lock_node_prefix(parsed->mode, parsed->owner_key, parsed->guid);
  if (input.substr(0, prefix.size()) != prefix) std::abort();
  // The suffix names the sequence it was parsed into.
  const std::string_view suffix = input.substr(prefix.size());
  if (std::strtoll(std::string(suffix).c_str(), nullptr, 10) != parsed->sequence) std::abort();
  if (zklock::protocol::compare_sequence(parsed->sequence, parsed->sequence) != 0) std::abort();
  return 0;
}
