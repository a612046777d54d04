// Leaving a diverged server: the session moves to the connect string's other members.
//
// A waiter's watchdog found this session's server listing a node that the
// leader says is gone (Client::Impl::note_diverged): reads through that
// server may be wrong, and every later waiter behind such a ghost waits a
// watchdog period for nothing. So the session leaves it: zoo_set_servers
// with the other members. What the C client (3.8.0) does with that:
//
//  - It compares members by address without the port (addrvec_contains).
//    When no remaining member shares the diverged server's address, the
//    current server is "not in the new list": it closes the connection at
//    once and connects the same session to one of the others (update_addrs).
//    That close is silent — no CONNECTING event, and requests outstanding
//    on the old connection stay queued, so the first answer on the new one
//    does not match them and the C client drops that connection too
//    ("unexpected server response", ZRUNTIMEINCONSISTENCY, which zklock
//    treats like a connection loss: outcome unknown). Evidence for the
//    validity bound is safe across it: the new connection's CONNECTED event
//    comes before any of its answers (Handle::connection).
//  - When a remaining member shares the address (several members on one
//    host), the C client keeps the connection; the new list takes effect at
//    the next reconnect, whatever breaks the connection.
//
// Several waiters may find the same ghost: a move only acts while the
// session is still connected to the server found diverged, so the second
// does not move the session off the next member. The member stays out of
// the list for kQuarantine; then the full list comes back (with it out, one
// more failure could leave the session no quorum member to reach; the C
// client then moves a session to the member that came back with the
// probability that balances load, 1/n of n members). A session replaced
// after expiry starts with the full list.
#include "server_move.hpp"

#include <netdb.h>

#include <cstring>
#include <string>
#include <vector>

#include "connect_string.hpp"

namespace zklock {
namespace {

constexpr auto kQuarantine = std::chrono::minutes(5);

std::string join(const std::vector<std::string>& hosts) {
  std::string out;
  for (const auto& h : hosts) out += (out.empty() ? "" : ",") + h;
  return out;
}

// Same address; with `port`, the same port too.
bool same(const sockaddr_storage& a, const sockaddr_storage& b, bool port) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    const auto& x = reinterpret_cast<const sockaddr_in&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in&>(b);
    return x.sin_addr.s_addr == y.sin_addr.s_addr && (!port || x.sin_port == y.sin_port);
  }
  if (a.ss_family == AF_INET6) {
    const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
    return std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof x.sin6_addr) == 0 && (!port || x.sin6_port == y.sin6_port);
  }
  return false;
}

// What "host:port" resolves to.
std::vector<sockaddr_storage> resolve(const std::string& hp) {
  std::vector<sockaddr_storage> out;
  const auto hostport = host_and_port(hp);
  if (!hostport) return out;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(hostport->first.c_str(), hostport->second.c_str(), &hints, &res) != 0) return out;
  for (auto* r = res; r != nullptr; r = r->ai_next) {
    sockaddr_storage s{};
    std::memcpy(&s, r->ai_addr, std::min<std::size_t>(r->ai_addrlen, sizeof s));
    out.push_back(s);
  }
  freeaddrinfo(res);
  return out;
}

// The full list again at `when`, only while connected: 3.8.0's
// zoo_set_servers can free the address list under the I/O thread that is
// printing it while every member fails (fixed upstream later). Disconnected,
// it tries again a few seconds on; a replaced session started with the full
// list already (ZSESSIONEXPIRED ends the retries).
void restore_list(Client::Impl& impl, std::uint64_t epoch, std::string full, Clock::time_point when) {
  impl.schedule_at(when, [&impl, epoch, full = std::move(full)] {
    const int rc = impl.issue(
        [&](zhandle_t* zh, Handle*) -> int {
          sockaddr_storage now{};
          socklen_t len = sizeof now;
          if (zookeeper_get_connected_host(zh, reinterpret_cast<sockaddr*>(&now), &len) == nullptr)
            return ZCONNECTIONLOSS;
          return zoo_set_servers(zh, full.c_str());
        },
        epoch);
    if (rc == ZCONNECTIONLOSS) restore_list(impl, epoch, full, Clock::now() + std::chrono::seconds(5));
  });
}

}  // namespace

std::optional<ConnectedServer> connected_server(Client::Impl& impl) {
  ConnectedServer s;
  const int rc = impl.issue([&](zhandle_t* zh, Handle* h) -> int {
    socklen_t len = sizeof s.addr;
    if (zookeeper_get_connected_host(zh, reinterpret_cast<sockaddr*>(&s.addr), &len) == nullptr) return ZCONNECTIONLOSS;
    s.epoch = h->epoch;
    return ZOK;
  });
  if (rc != ZOK) return std::nullopt;
  return s;
}

void leave_diverged_server(Client::Impl& impl, const ConnectedServer& diverged) {
  const auto all = connect_members(impl.opts.connect);
  std::vector<std::string> others;  // resolved outside every lock: DNS may block
  bool address_shared = false;
  for (const auto& hp : all) {
    bool is_it = false, shares = false;
    for (const auto& a : resolve(hp)) {
      is_it = is_it || same(a, diverged.addr, true);
      shares = shares || same(a, diverged.addr, false);
    }
    if (is_it) continue;
    others.push_back(hp);
    address_shared = address_shared || shares;
  }
  const auto id = impl.session_id();
  if (others.empty() || others.size() == all.size()) {
    impl.log->warn("zookeeper session 0x{:x} stays on its diverged server: {}", id,
                   others.empty() ? "the connect string names no other" : "it is not one the connect string names");
    return;
  }
  bool moved = false;
  const auto list = join(others);
  const int rc = impl.issue(
      [&](zhandle_t* zh, Handle*) -> int {
        sockaddr_storage now{};
        socklen_t len = sizeof now;
        // Gone from it already (a waiter before us moved it, or it broke).
        if (zookeeper_get_connected_host(zh, reinterpret_cast<sockaddr*>(&now), &len) == nullptr ||
            !same(now, diverged.addr, true))
          return ZOK;
        moved = true;
        return zoo_set_servers(zh, list.c_str());
      },
      diverged.epoch);
  if (rc != ZOK) {
    impl.log->warn("zookeeper session 0x{:x} could not leave its diverged server: {}", id, zerror(rc));
    return;
  }
  if (!moved) return;
  impl.log->warn("zookeeper session 0x{:x} leaves its diverged server for {} ({}; the full list again in {} min)", id,
                 list,
                 address_shared ? "at its next reconnect: the C client tells members apart by address alone, and "
                                  "another member shares this one's"
                                : "now",
                 std::chrono::duration_cast<std::chrono::minutes>(kQuarantine).count());
  restore_list(impl, diverged.epoch, join(all), Clock::now() + kQuarantine);
}

}  // namespace zklock
