// Leaving a diverged server: the session moves to the connect string's other members.
#pragma once

#include <sys/socket.h>

#include <cstdint>
#include <optional>

#include "client_impl.hpp"

namespace zklock {

// The server a session is connected to, and which session (its epoch).
struct ConnectedServer {
  std::uint64_t epoch = 0;
  sockaddr_storage addr{};
};

// The server `impl`'s session is connected to now; nothing when it is not
// connected. Takes the shared handle lock, as issuing a request does.
std::optional<ConnectedServer> connected_server(Client::Impl& impl);

// Moves the session off `diverged` (server_move.cpp): the connect string's
// other members become its server list, for a while. On the timer thread:
// it resolves names.
void leave_diverged_server(Client::Impl& impl, const ConnectedServer& diverged);

}  // namespace zklock
