// A ZooKeeper connect string's members: "host:port[,host:port...][/chroot]".
#pragma once

#include <optional>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

namespace zklock {

// The "host:port" entries, in order, without the chroot.
inline std::vector<std::string> connect_members(const std::string& connect) {
  std::vector<std::string> out;
  std::istringstream in(connect.substr(0, connect.find('/')));
  std::string hp;
  while (std::getline(in, hp, ',')) out.push_back(hp);
  return out;
}

// One entry's host (IPv6 brackets removed) and port; none without a colon.
inline std::optional<std::pair<std::string, std::string>> host_and_port(const std::string& hp) {
  const auto colon = hp.rfind(':');
  if (colon == std::string::npos) return std::nullopt;
  auto host = hp.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  return std::pair{std::move(host), hp.substr(colon + 1)};
}

}  // namespace zklock
