// Leaving a diverged server: the session moves to another member of the connect string.
//
// A waiter's watchdog found this session's server listing a node that the
// leader says is gone (Client::Impl::note_diverged): every read through that
// server may be wrong, and every later waiter behind such a ghost waits a
// watchdog period for nothing. So the session leaves it: zoo_set_servers
// with the other members makes the C client drop the connection and
// reconnect to one of them (the same session: nothing is lost, the recipes
// see a blip). The member stays out of this session's list for
// kQuarantine, then the full list comes back, since with it out a second
// failure could leave the session no quorum member to reach. A session
// replaced after expiry starts with the full list.
#include <netdb.h>
#include <sys/socket.h>

#include <cstring>
#include <sstream>
#include <vector>

#include "client_impl.hpp"

namespace zklock {
namespace {

constexpr auto kQuarantine = std::chrono::minutes(5);

// "host:port" entries of a connect string, without the chroot.
std::vector<std::string> hosts_of(const std::string& connect) {
  std::vector<std::string> out;
  std::istringstream in(connect.substr(0, connect.find('/')));
  std::string hp;
  while (std::getline(in, hp, ',')) out.push_back(hp);
  return out;
}

std::string join(const std::vector<std::string>& hosts) {
  std::string out;
  for (const auto& h : hosts) out += (out.empty() ? "" : ",") + h;
  return out;
}

bool same_address(const sockaddr* a, const sockaddr* b) {
  if (a->sa_family != b->sa_family) return false;
  if (a->sa_family == AF_INET) {
    const auto* x = reinterpret_cast<const sockaddr_in*>(a);
    const auto* y = reinterpret_cast<const sockaddr_in*>(b);
    return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
  }
  if (a->sa_family == AF_INET6) {
    const auto* x = reinterpret_cast<const sockaddr_in6*>(a);
    const auto* y = reinterpret_cast<const sockaddr_in6*>(b);
    return x->sin6_port == y->sin6_port && std::memcmp(&x->sin6_addr, &y->sin6_addr, sizeof x->sin6_addr) == 0;
  }
  return false;
}

// Whether "host:port" resolves to `addr` (the server connected to).
bool names(const std::string& hp, const sockaddr* addr) {
  const auto colon = hp.rfind(':');
  if (colon == std::string::npos) return false;
  auto host = hp.substr(0, colon);
  if (host.size() > 2 && host.front() == '[') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), hp.substr(colon + 1).c_str(), &hints, &res) != 0) return false;
  bool found = false;
  for (auto* r = res; r != nullptr && !found; r = r->ai_next) found = same_address(r->ai_addr, addr);
  freeaddrinfo(res);
  return found;
}

}  // namespace

void Client::Impl::leave_current_server() {
  const auto all = hosts_of(opts.connect);
  sockaddr_storage addr{};
  std::uint64_t epoch = 0;
  {
    std::shared_lock lk(handle_mu_);
    if (handle_ == nullptr || closing_) return;
    epoch = handle_->epoch;
    // One move per session and quarantine: several waiters may find the
    // same server diverged, and the second must not move off the next one.
    if (left_server_epoch_ == epoch) return;
    socklen_t len = sizeof addr;
    if (zookeeper_get_connected_host(handle_->zh.get(), reinterpret_cast<sockaddr*>(&addr), &len) == nullptr) return;
  }
  std::vector<std::string> others;  // resolved unlocked: DNS may block
  for (const auto& hp : all) {
    if (!names(hp, reinterpret_cast<const sockaddr*>(&addr))) others.push_back(hp);
  }
  if (others.empty() || others.size() == all.size()) {
    log->warn("zookeeper session 0x{:x} stays on its diverged server: {}", session_id(),
              others.empty() ? "the connect string names no other" : "it is not one the connect string names");
    return;
  }
  {
    std::shared_lock lk(handle_mu_);
    if (handle_ == nullptr || closing_ || handle_->epoch != epoch || left_server_epoch_ == epoch) return;
    const int rc = zoo_set_servers(handle_->zh.get(), join(others).c_str());
    if (rc != ZOK) {
      log->warn("zookeeper session 0x{:x} could not leave its diverged server: {}", session_id(), zerror(rc));
      return;
    }
    left_server_epoch_ = epoch;
  }
  servers_left_.fetch_add(1);
  log->warn("zookeeper session 0x{:x} leaves its diverged server for {} ({} min; then the full list again)",
            session_id(), join(others), std::chrono::duration_cast<std::chrono::minutes>(kQuarantine).count());
  schedule_at(Clock::now() + kQuarantine, [this, epoch, all = join(all)] {
    std::shared_lock lk(handle_mu_);
    if (handle_ == nullptr || closing_ || handle_->epoch != epoch) return;
    left_server_epoch_ = 0;
    zoo_set_servers(handle_->zh.get(), all.c_str());
  });
}

}  // namespace zklock
