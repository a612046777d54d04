// The detector's health (/healthz): the age of its latest successful ZooKeeper request, and the probe that keeps one recent.
#include <algorithm>

#include <spdlog/fmt/fmt.h>

#include "detector/daemon.hpp"

namespace zklock::detector {

std::chrono::milliseconds Daemon::health_bound() const {
  return std::max<std::chrono::milliseconds>(3 * config_.interval, std::chrono::seconds(5));
}

// A health check answers from a request that just succeeded, not from a
// connection state: a session in a reconnect loop looks connected half the
// time, and a process whose scans stopped is merely alive.
std::string Daemon::health() const {
  const auto age = std::chrono::duration_cast<std::chrono::milliseconds>(
      Clock::now() - Clock::time_point(Clock::duration(last_answer_.load())));
  if (age > health_bound()) {
    const auto loops = client_->reconnect_loops_seen();
    return fmt::format("no ZooKeeper request of this detector has succeeded for {} ms (unhealthy past {} ms: 3 x "
                       "the scan interval, at least 5 s); session state {}{}",
                       age.count(), health_bound().count(), state_name(client_->state()),
                       loops ? fmt::format("; {} reconnect loop(s) seen (docs/operations.md, \"A reconnect loop\")",
                                           loops)
                             : std::string());
  }
  if (!client_->connected()) return "not connected to ZooKeeper";
  return {};
}

// One exists() of the root, at most one in flight: its answer (the node or
// "no node", both the server's) is what health() measures.
void Daemon::probe() {
  if (probing_.exchange(true)) return;
  client_->stat_async(config_.root, {}, [this](Status s, const Stat&) {
    if (s.ok() || s.is(Errc::no_node)) last_answer_.store(Clock::now().time_since_epoch().count());
    probing_.store(false);
  });
}

}  // namespace zklock::detector
