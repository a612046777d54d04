// Generic path helpers: split, join, syntax, lock-path rules.
#include "zklock/path.hpp"

#include "zklock/error.hpp"
#include "zklock/protocol/paths.hpp"

namespace zklock {

std::pair<std::string, std::string> split_path(std::string_view path) {
  const auto slash = path.rfind('/');
  if (slash == std::string_view::npos) return {"", std::string(path)};
  std::string parent(slash == 0 ? "/" : path.substr(0, slash));
  return {parent, std::string(path.substr(slash + 1))};
}

std::string join_path(std::string_view parent, std::string_view name) {
  std::string out(parent);
  if (out.empty() || out.back() != '/') out += '/';
  out += name;
  return out;
}

void validate_path_syntax(std::string_view path, std::string_view what) {
  auto fail = [&](const char* why) {
    throw Error(Errc::invalid_argument,
                "invalid " + std::string(what) + " '" + std::string(path.substr(0, 200)) + "': " + why);
  };
  if (path.empty() || path[0] != '/') fail("must be absolute (start with '/')");
  if (path == "/") return;
  if (path.back() == '/') fail("trailing '/'");
  std::size_t start = 1;
  while (start <= path.size()) {
    auto end = path.find('/', start);
    if (end == std::string_view::npos) end = path.size();
    const auto comp = path.substr(start, end - start);
    if (comp.empty()) fail("empty component ('//')");
    if (comp == "." || comp == "..") fail("'.' and '..' components are not allowed");
    for (unsigned char c : comp) {
      if (c < 0x20 || c == 0x7f) fail("control character");
    }
    start = end + 1;
  }
}

void validate_lock_path(std::string_view path) {
  validate_path_syntax(path, "lock path");
  auto fail = [&](const char* why) {
    throw Error(Errc::invalid_argument,
                "invalid lock path '" + std::string(path.substr(0, 200)) + "': " + why);
  };
  if (path == "/") fail("the root cannot be a lock");
  if (path == "/zookeeper" || path.starts_with("/zookeeper/")) fail("/zookeeper is reserved");
  if (protocol::is_metadata_path(path)) fail("/zklock holds zklock's metadata");
}

}  // namespace zklock
