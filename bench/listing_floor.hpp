// The floor of the detector's load (detector_scale.cpp): what the server
// allows. A bare C-client loader lists every directory under a root (every
// child that is not a zklock lock node) with a child watch, as the mirror's
// load does, with nothing else around it: no state kept beyond the queue of
// paths to list, no budget, no node reads. The paths are dealt round-robin
// over `sessions` raw sessions as they are found, `depth` listings
// outstanding in all (the server's globalOutstandingLimit is 1,000).
#pragma once

#include <cstddef>
#include <string>

#include "measure.hpp"

namespace zklock::bench {

struct ListingFloor {
  double seconds = kNone;     // from the first listing until the last answer
  std::size_t listings = 0;   // answered listings (one per directory)
  double server_cpu = kNone;  // the server's CPU seconds meanwhile (env.server_pid; kNone without it)
};

// Throws std::runtime_error if a listing fails or the load outlasts 10 minutes.
ListingFloor listing_floor(const Env& env, const std::string& root, int sessions, std::size_t depth = 1000);

}  // namespace zklock::bench
