// A fault-injecting TCP proxy for integration tests (loopback only).
//
// Put it between a client and one ZooKeeper server (connect the client to
// 127.0.0.1:port()) to lose a connection at an exact point of a request's
// life, or to keep a client away from a server that keeps running (the only
// way a standalone server expires a live client's session: a restarted server
// reloads sessions with fresh timers, and a resumed frozen one may accept the
// reconnect before it expires anyone).
#pragma once

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace zklock::test {

// A loopback TCP proxy in front of one server, with fault switches: it can
// swallow replies (the server still executes the requests), swallow
// requests, refuse new connections, and cut every open connection. This is
// how a connection is lost at an exact point of a request's life.
class FaultProxy {
 public:
  explicit FaultProxy(int target_port) : target_(target_port) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || ::listen(listen_fd_, 64) != 0)
      throw std::runtime_error("proxy: bind/listen failed");
    socklen_t len = sizeof a;
    ::getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&a), &len);
    port_ = ntohs(a.sin_port);
    if (::pipe2(wake_, O_CLOEXEC | O_NONBLOCK) != 0) throw std::runtime_error("proxy: pipe failed");
    thread_ = std::thread([this] { loop(); });
  }
  ~FaultProxy() {
    {
      std::lock_guard lk(mu_);
      stop_ = true;
    }
    wake();
    thread_.join();
    for (auto& p : pairs_) close_pair(p);
    ::close(listen_fd_);
    ::close(wake_[0]);
    ::close(wake_[1]);
  }
  FaultProxy(const FaultProxy&) = delete;
  FaultProxy& operator=(const FaultProxy&) = delete;

  std::string connect_string() const { return "127.0.0.1:" + std::to_string(port_); }
  void drop_replies(bool on) { set(drop_replies_, on); }
  void drop_requests(bool on) { set(drop_requests_, on); }
  void refuse(bool on) { set(refuse_, on); }
  std::size_t dropped_request_bytes() const {
    std::lock_guard lk(mu_);
    return dropped_requests_;
  }
  // Closes every open connection; returns once they are closed.
  void cut() {
    std::unique_lock lk(mu_);
    const auto want = cuts_done_ + 1;
    cut_requested_ = true;
    lk.unlock();
    wake();
    lk.lock();
    if (!cv_.wait_for(lk, std::chrono::seconds(5), [&] { return cuts_done_ >= want; })) throw std::runtime_error("proxy: cut timed out");
  }

 private:
  struct Pair {
    int client = -1, server = -1;
  };
  void set(bool& flag, bool on) {
    std::lock_guard lk(mu_);
    flag = on;
  }
  void wake() { (void)!::write(wake_[1], "x", 1); }
  static void close_pair(Pair& p) {
    if (p.client >= 0) ::close(p.client);
    if (p.server >= 0) ::close(p.server);
    p.client = p.server = -1;
  }
  static bool write_all(int fd, const char* buf, ssize_t n) {
    while (n > 0) {
      const ssize_t w = ::send(fd, buf, static_cast<std::size_t>(n), MSG_NOSIGNAL);
      if (w <= 0) return false;
      buf += w;
      n -= w;
    }
    return true;
  }
  int connect_target() const {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<std::uint16_t>(target_));
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      ::close(fd);
      return -1;
    }
    return fd;
  }
  void loop() {
    char buf[65536];
    while (true) {
      std::vector<pollfd> fds{{wake_[0], POLLIN, 0}, {listen_fd_, POLLIN, 0}};
      for (auto& p : pairs_) {
        fds.push_back({p.client, POLLIN, 0});
        fds.push_back({p.server, POLLIN, 0});
      }
      ::poll(fds.data(), fds.size(), -1);
      while (::read(wake_[0], buf, sizeof buf) > 0) {
      }
      bool drop_rep, drop_req, refuse;
      {
        std::lock_guard lk(mu_);
        if (stop_) return;
        if (cut_requested_) {
          for (auto& p : pairs_) close_pair(p);
          pairs_.clear();
          cut_requested_ = false;
          ++cuts_done_;
          cv_.notify_all();
          continue;
        }
        drop_rep = drop_replies_;
        drop_req = drop_requests_;
        refuse = refuse_;
      }
      const std::size_t polled = (fds.size() - 2) / 2;
      for (std::size_t i = 0; i < polled; ++i) {
        auto& p = pairs_[i];
        for (int dir = 0; dir < 2 && p.client >= 0; ++dir) {
          if (!(fds[2 + 2 * i + static_cast<std::size_t>(dir)].revents & (POLLIN | POLLHUP | POLLERR))) continue;
          const int from = dir == 0 ? p.client : p.server;
          const int to = dir == 0 ? p.server : p.client;
          const ssize_t n = ::read(from, buf, sizeof buf);
          if (n <= 0) {
            close_pair(p);
            break;
          }
          if (dir == 0 && drop_req) {
            std::lock_guard lk(mu_);
            dropped_requests_ += static_cast<std::size_t>(n);
          } else if (!(dir == 1 && drop_rep) && !write_all(to, buf, n)) {
            close_pair(p);
          }
        }
      }
      std::erase_if(pairs_, [](const Pair& p) { return p.client < 0; });
      if (fds[1].revents & POLLIN) {
        const int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        if (c >= 0) {
          const int s = refuse ? -1 : connect_target();
          if (s < 0) ::close(c);
          else pairs_.push_back({c, s});
        }
      }
    }
  }

  const int target_;
  int port_ = 0;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};
  std::vector<Pair> pairs_;  // proxy thread only
  mutable std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false, drop_replies_ = false, drop_requests_ = false, refuse_ = false;  // GUARDED_BY(mu_)
  bool cut_requested_ = false;                                                       // GUARDED_BY(mu_)
  std::uint64_t cuts_done_ = 0;                                                      // GUARDED_BY(mu_)
  std::size_t dropped_requests_ = 0;                                                 // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace zklock::test
