// libFuzzer: FencingToken::try_parse over arbitrary token text.
//
// The token text is what a protected resource receives from its clients.
// Properties: never crashes; only the canonical form parses, so a parsed
// token prints back to exactly the input; parse() agrees with try_parse();
// a token equals itself and is ordered against itself.
#include <compare>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "zklock/error.hpp"
#include "zklock/token.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  const auto token = zklock::FencingToken::try_parse(input);
  bool threw = false;
  try {
    (void)zklock::FencingToken::parse(input);
  } catch (const zklock::Error&) {
    threw = true;
  }
  if (threw == token.has_value()) std::abort();
  if (!token) return 0;
  if (token->str() != input) std::abort();
  if (!zklock::is_uuid(token->ensemble_id()) || token->czxid() < 0) std::abort();
  if (!(*token == *token) || !std::is_eq(*token <=> *token)) std::abort();
  return 0;
}
