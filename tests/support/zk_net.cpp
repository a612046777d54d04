// Loopback ports and four-letter words: free_loopback_port, four_letter_word, parse_mntr.
#include "zk_net.hpp"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <fstream>
#include <mutex>
#include <random>
#include <set>

namespace zklock::test {

using detail::errno_text;
using detail::remaining;

int free_loopback_port() {
  // Below the ephemeral range (ip_local_port_range), so outgoing connections
  // never hold the port.  A per-process random start and a used-set keep
  // parallel test binaries and repeated picks apart.
  static std::mutex mu;
  static std::set<int> handed_out;
  static std::mt19937 rng(static_cast<unsigned>(::getpid()) ^
                          static_cast<unsigned>(Clock::now().time_since_epoch().count()));
  int low = 32768;
  {
    std::ifstream range("/proc/sys/net/ipv4/ip_local_port_range");
    int lo = 0, hi = 0;
    if (range >> lo >> hi && lo > 12000) low = lo;
  }
  const int first = 10000, last = low - 1;
  std::lock_guard lock(mu);
  std::uniform_int_distribution<int> pick(first, last);
  for (int attempt = 0; attempt < 500; ++attempt) {
    int port = pick(rng);
    if (handed_out.count(port) != 0) continue;
    int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) throw HarnessError(errno_text("socket", errno));
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons(static_cast<uint16_t>(port));
    // No SO_REUSEADDR: a port in TIME_WAIT or in use is refused, as wanted.
    int rc = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
    ::close(fd);
    if (rc == 0) {
      handed_out.insert(port);
      return port;
    }
  }
  throw HarnessError("free_loopback_port: no free port found in 500 tries");
}

std::int64_t last_zxid(const std::string& host, int port) {
  const auto text = four_letter_word(host, port, "srvr");
  if (!text) return -1;
  const auto at = text->find("Zxid: 0x");
  if (at == std::string::npos) return -1;
  return std::stoll(text->substr(at + 8), nullptr, 16);
}

std::optional<std::string> four_letter_word(const std::string& host, int port,
                                            std::string_view word, milliseconds timeout) {
  auto deadline = Clock::now() + timeout;
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
  if (fd < 0) return std::nullopt;
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};

  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  if (::inet_pton(AF_INET, host.c_str(), &addr.sin_addr) != 1) return std::nullopt;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    if (errno != EINPROGRESS) return std::nullopt;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(remaining(deadline).count())) != 1) return std::nullopt;
    int err = 0;
    socklen_t len = sizeof err;
    if (::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) return std::nullopt;
  }
  std::size_t sent = 0;
  while (sent < word.size()) {
    ssize_t n = ::send(fd, word.data() + sent, word.size() - sent, MSG_NOSIGNAL);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno != EAGAIN && errno != EINTR) return std::nullopt;
    pollfd p{fd, POLLOUT, 0};
    if (::poll(&p, 1, static_cast<int>(remaining(deadline).count())) != 1) return std::nullopt;
  }
  ::shutdown(fd, SHUT_WR);
  std::string answer;
  char buf[4096];
  while (true) {
    ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      answer.append(buf, static_cast<std::size_t>(n));
      continue;
    }
    if (n == 0) return answer;  // the server closes after answering
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    int left = static_cast<int>(remaining(deadline).count());
    if (left <= 0 || ::poll(&p, 1, left) != 1) return std::nullopt;
  }
}

std::optional<std::int64_t> Mntr::counter(std::string_view key) const {
  auto it = values.find(std::string(key));
  if (it == values.end()) return std::nullopt;
  std::int64_t v = 0;
  const std::string& s = it->second;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::optional<std::string> Mntr::text(std::string_view key) const {
  auto it = values.find(std::string(key));
  if (it == values.end()) return std::nullopt;
  return it->second;
}

Mntr parse_mntr(std::string_view text) {
  Mntr out;
  while (!text.empty()) {
    auto nl = text.find('\n');
    std::string_view line = text.substr(0, nl);
    text = nl == std::string_view::npos ? std::string_view() : text.substr(nl + 1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    auto tab = line.find('\t');
    if (tab == std::string_view::npos || tab == 0) continue;
    out.values[std::string(line.substr(0, tab))] = std::string(line.substr(tab + 1));
  }
  return out;
}

}  // namespace zklock::test
