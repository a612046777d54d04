// One HTTP GET over loopback, for the tests of the detector's status page and the metrics exporter.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace zklock::test {

struct HttpResponse {
  int status = 0;
  std::string head, body;
  double ms = 0;  // from connect to the end of the answer
};

// One GET with "Connection: close", read until the server closes, 5 s at
// most per read or write; nullopt when nothing that reads as HTTP came back.
// The request side is not half-closed: cpp-httplib takes a half-closed
// socket for a dead one and drops a large answer midway.
inline std::optional<HttpResponse> http_get_any(int port, const std::string& path) {
  const auto start = std::chrono::steady_clock::now();
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  struct Closer {
    int fd;
    ~Closer() { ::close(fd); }
  } closer{fd};
  timeval tv{5, 0};
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  ::setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) return std::nullopt;
  const std::string request = "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (::send(fd, request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) {
    return std::nullopt;
  }
  std::string answer;
  char buf[16384];
  for (;;) {
    const auto n = ::recv(fd, buf, sizeof buf, 0);
    if (n > 0) {
      answer.append(buf, static_cast<std::size_t>(n));
    } else if (n == 0) {
      break;
    } else if (errno != EINTR) {
      return std::nullopt;  // includes the 5 s timeout
    }
  }
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const auto split = answer.find("\r\n\r\n");
  if (answer.rfind("HTTP/1.", 0) != 0 || split == std::string::npos || answer.size() < 12) return std::nullopt;
  return HttpResponse{std::stoi(answer.substr(9, 3)), answer.substr(0, split), answer.substr(split + 4), ms};
}

// The same, nullopt unless the status is 200.
inline std::optional<HttpResponse> http_get(int port, const std::string& path) {
  auto r = http_get_any(port, path);
  if (!r || r->status != 200) return std::nullopt;
  return r;
}

}  // namespace zklock::test
