// StripedMutex: picks one of N FairMutexes by the FNV-1a hash of a key (the protocol's mapping).
#include "zklock/striped_mutex.hpp"

#include "zklock/path.hpp"
#include "zklock/protocol/node_name.hpp"

namespace zklock {

StripedMutex::StripedMutex(Client& client, std::string base_path, std::size_t stripes, MutexOptions options)
    : base_(std::move(base_path)) {
  validate_lock_path(base_);
  if (stripes == 0) throw Error(Errc::invalid_argument, "StripedMutex needs at least one stripe");
  stripes_.reserve(stripes);
  for (std::size_t i = 0; i < stripes; ++i) stripes_.emplace_back(client, stripe_path(base_, i), options);
}

std::size_t StripedMutex::stripe_of(std::string_view key, std::size_t stripes) noexcept {
  return static_cast<std::size_t>(protocol::fnv1a64(key) % static_cast<std::uint64_t>(stripes));
}

std::string StripedMutex::stripe_path(std::string_view base, std::size_t i) {
  return join_path(base, "stripe-" + std::to_string(i));
}

}  // namespace zklock
