// zklock/testing/client_probe.hpp: the figures read from Client::Impl.
#include "zklock/testing/client_probe.hpp"

#include "client_impl.hpp"

namespace zklock::testing {

std::uint64_t heartbeat_writes(const Client& client) {
  return detail::ClientAccess::impl(client)->heartbeat_writes();
}

std::chrono::milliseconds heartbeat_period(const Client& client) {
  return detail::ClientAccess::impl(client)->heartbeat_period();
}

}  // namespace zklock::testing
