// zklock::StripedMutex — N independent FairMutexes, chosen by a key's hash.
//
//   zklock::StripedMutex striped(client, "/locks/account", 16);
//   zklock::Lease l = striped.for_key("acct-991").acquire();
//
// Key k maps to stripe i = fnv1a64(bytes of k) % N, the FairMutex at
// "<base>/stripe-<i>" (decimal i, no padding). The mapping is part of the
// protocol (docs/protocol.md): every process, platform, language and release
// that uses the same base path and N agrees on it. Never std::hash. Changing
// N remaps keys: all users of one base path must agree on N.
//
// Two keys on one stripe contend (and are one lock to the detector); one
// owner taking two keys that share a stripe gets Errc::would_deadlock, as
// for any lock taken twice. Take several keys through MultiLock over the
// distinct stripe paths instead.
//
// Thread-safety: immutable after construction; may be shared by threads.
// The Client must outlive it and its leases.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "zklock/client.hpp"
#include "zklock/fair_mutex.hpp"

namespace zklock {

class StripedMutex {
 public:
  // Throws Error(invalid_argument) for a malformed base path or stripes == 0.
  StripedMutex(Client& client, std::string base_path, std::size_t stripes, MutexOptions options = {});

  // The stripe guarding `key`.
  FairMutex& for_key(std::string_view key) { return stripes_[stripe_index(key)]; }
  std::size_t stripe_index(std::string_view key) const noexcept { return stripe_of(key, stripes_.size()); }
  // Stripe i (REQUIRES i < size()).
  FairMutex& stripe(std::size_t i) { return stripes_.at(i); }

  std::size_t size() const noexcept { return stripes_.size(); }
  const std::string& path() const noexcept { return base_; }

  // The protocol's mapping without an instance: fnv1a64(key) % stripes.
  // REQUIRES stripes > 0.
  static std::size_t stripe_of(std::string_view key, std::size_t stripes) noexcept;
  // "<base>/stripe-<i>".
  static std::string stripe_path(std::string_view base, std::size_t i);

 private:
  std::string base_;
  std::vector<FairMutex> stripes_;
};

}  // namespace zklock
