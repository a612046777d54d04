// This machine's name and this process's "<host>/<pid>" (zklock/protocol/host.hpp).
#include "zklock/protocol/host.hpp"

#include <unistd.h>

namespace zklock::protocol {

std::string host_name() {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return "localhost";
  return buf;
}

std::string host_and_pid() { return host_name() + "/" + std::to_string(::getpid()); }

}  // namespace zklock::protocol
