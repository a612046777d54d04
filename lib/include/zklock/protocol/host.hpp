// This process as zklock's records name it: the host of a lock node's data,
// the default owner prefix and detector id "<host>/<pid>", the host of an
// operator's revocation record.
//
// Protocol module (zklock/protocol/): for zklock's own tools (detector, CLI)
// and for clients in other languages, not for applications, whose API is
// the headers directly in zklock/.
#pragma once

#include <string>

namespace zklock::protocol {

// gethostname(2), or "localhost" when it fails or is empty.
std::string host_name();

// "<host_name()>/<pid>".
std::string host_and_pid();

}  // namespace zklock::protocol
