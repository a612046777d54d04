// A fault-injecting TCP proxy for integration tests (loopback only).
//
// Put it between a client and one ZooKeeper server (connect the client to
// 127.0.0.1:port()) to lose a connection at an exact point of a request's
// life, or to keep a client away from a server that keeps running (the only
// way a standalone server expires a live client's session: a restarted server
// reloads sessions with fresh timers, and a resumed frozen one may accept the
// reconnect before it expires anyone).
#pragma once

#include <algorithm>
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>
#include <map>
#include <unordered_map>
#include <utility>
#include <vector>

#include "zk_wire.hpp"

namespace zklock::test {

// A loopback TCP proxy in front of one server, with fault switches: it can
// swallow replies (the server still executes the requests), swallow
// requests, refuse new connections, cut every open connection, cut one
// connection exactly when its client sends a request naming a given path,
// and cut every connection on which a request of a given type is sent.
// This is how a connection is lost at an exact point of a request's life.
// It can also hold a connection's requests from such a request on, and let
// them go later: how a request is kept unanswered past a client's deadline.
//
// Both ways, bytes are forwarded whole ZooKeeper frames at a time (a 4-byte
// big-endian length, then that many bytes; zk_wire.hpp); a frame split
// across reads waits for its rest. The proxy reads what it needs of the
// protocol: request paths (cut or hold one request), notifications (drop
// one), and getChildren and getData answers (a ghost node).
class FaultProxy {
 public:
  // How client-to-server bytes are forwarded: in ZooKeeper client frames
  // (what cut_on_request needs), or raw as they come (any other protocol,
  // e.g. a server's quorum and election ports; cut_on_request never fires).
  enum class Framing { zookeeper, raw };
  // `listen_ip`: a loopback address other than 127.0.0.1 (127.0.0.2, ...)
  // makes the proxy a server at an address of its own, as members on
  // different hosts are (the C client tells servers apart by address).
  explicit FaultProxy(int target_port, Framing framing = Framing::zookeeper, std::string listen_ip = "127.0.0.1")
      : target_(target_port), raw_(framing == Framing::raw), listen_ip_(std::move(listen_ip)) {
    listen_fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    ::setsockopt(listen_fd_, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    if (::inet_pton(AF_INET, listen_ip_.c_str(), &a.sin_addr) != 1) throw std::runtime_error("proxy: bad listen address");
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

  std::string connect_string() const { return listen_ip_ + ":" + std::to_string(port_); }
  // How many client connections reached the server through the proxy.
  std::size_t connections() const {
    std::lock_guard lk(mu_);
    return connections_;
  }
  int port() const { return port_; }
  // Blackholes the link both ways: open connections stay open and new ones
  // are accepted, but no byte passes (a partition the peers notice only by
  // their own timeouts).
  void blackhole(bool on) {
    std::lock_guard lk(mu_);
    drop_requests_ = drop_replies_ = on;
  }
  void drop_replies(bool on) { set(drop_replies_, on); }
  void drop_requests(bool on) { set(drop_requests_, on); }
  void refuse(bool on) { set(refuse_, on); }
  std::size_t dropped_request_bytes() const {
    std::lock_guard lk(mu_);
    return dropped_requests_;
  }
  // Arms a one-shot fault: the first request sent after this call, on any
  // connection, whose body opens with `path` (create, delete, exists,
  // getData, setData, getChildren, ... — every request that names one node
  // first; `opcode` >= 0 narrows it to that ZooKeeper opcode, e.g. 3 for
  // exists) is swallowed and that connection is cut at once: the server
  // never sees the request, the client gets ZCONNECTIONLOSS for it, and the
  // requests it sent before it on that connection were forwarded. Later
  // requests and connections pass. Re-arming replaces the rule.
  void cut_on_request(std::string path, int opcode = -1) { arm(std::move(path), opcode, false); }
  // The same one-shot rule, but the matching request is held instead: it and
  // every later request on its connection wait in the proxy, in order, until
  // release_held(); the connection stays open and replies still pass. Keep
  // the hold well under the session timeout (the client's pings wait too).
  void hold_on_request(std::string path, int opcode = -1) { arm(std::move(path), opcode, true); }
  // Forwards everything held, in order; returns once it is on its way.
  void release_held() { ask_loop(release_requested_, releases_done_, "release"); }
  // How many connections hold_on_request() has held.
  std::uint64_t request_holds() const {
    std::lock_guard lk(mu_);
    return request_holds_;
  }
  void disarm_cut_on_request() { set(cut_armed_, false); }
  // A standing rule, until cut_on_opcode(-1): on every connection, a request
  // of ZooKeeper opcode `opcode` is swallowed and its connection cut at once.
  // With wire::kSetWatches it is what a server does with a SetWatches packet
  // larger than its jute.maxbuffer: the handshake before it re-validated the
  // session, then the connection closes before any answer. The C client
  // sends that packet first on every reconnect of a session with watches, so
  // the session reconnects and loses each connection, forever.
  void cut_on_opcode(int opcode) {
    std::lock_guard lk(mu_);
    cut_every_opcode_ = opcode;
  }
  // How many connections cut_on_opcode() has cut.
  std::uint64_t opcode_cuts() const {
    std::lock_guard lk(mu_);
    return opcode_cuts_;
  }
  // How many connections cut_on_request() has cut, and the opcode of the
  // last request that triggered it.
  std::uint64_t request_cuts() const {
    std::lock_guard lk(mu_);
    return request_cuts_;
  }
  int last_cut_opcode() const {
    std::lock_guard lk(mu_);
    return last_cut_opcode_;
  }
  // Closes every open connection; returns once they are closed.
  void cut() { ask_loop(cut_requested_, cuts_done_, "cut"); }

  // Which end of a proxied connection: the peer that connected to the proxy,
  // or the proxy's target.
  enum class Side { client, server };
  // A gray failure: every open connection is reset (RST) on side `reset` and
  // left open but silent on the other — bytes from it are swallowed, none
  // reach it — and new connections are reset at once, until heal_gray().
  // The reset peer notices at once; the other only by its own timeouts.
  // Returns once applied.
  void gray_cut(Side reset) {
    {
      std::lock_guard lk(mu_);
      gray_reset_ = reset;
    }
    ask_loop(gray_requested_, grays_done_, "gray cut");
  }
  // Ends gray_cut(): new connections pass again, and the silent ends left
  // from the cut are closed. Returns once applied.
  void heal_gray() { ask_loop(heal_requested_, heals_done_, "gray heal"); }
  // While on, server-to-client bytes wait in the proxy, in order, and
  // connections stay open (a delayed stream). Turning it off forwards what
  // waited and returns once it is on its way.
  void hold_replies(bool on) {
    if (on) return set(hold_replies_, true);
    ask_loop(flush_requested_, flushes_done_, "reply release");
  }
  // Arms a one-shot rule: the next notification of `type` (wire::kDeleted,
  // wire::kChildrenChanged, ...) for `path`, on any connection, is
  // swallowed; the client's watch never fires. Re-arming replaces it.
  void drop_notification(std::int32_t type, std::string path) {
    std::lock_guard lk(mu_);
    drop_type_ = type;
    drop_path_ = std::move(path);
    drop_armed_ = true;
  }
  // A ghost node, as a server that diverged from the quorum shows one:
  // until clear_ghost(), every successful getChildren answer for `parent`
  // lists `child` too, and getData of parent/child answers with empty data
  // instead of "no node" (so the client believes its watch set). Writes
  // pass untouched: the leader knows the node is gone.
  void ghost(std::string parent, std::string child) {
    std::lock_guard lk(mu_);
    ghost_path_ = std::move(parent);
    ghost_child_ = std::move(child);
    ghost_armed_ = true;
  }
  void clear_ghost() { set(ghost_armed_, false); }
  struct WireCounts {
    std::uint64_t notifications_passed = 0, notifications_dropped = 0, listings_rewritten = 0, reads_rewritten = 0;
  };
  WireCounts wire_counts() const {
    std::lock_guard lk(mu_);
    return wire_;
  }
  // How many answers without error to requests of `type` (wire::kGetData,
  // ...) naming `path` have passed to a client: for a getData with a watch,
  // how often that watch has been set.
  std::uint64_t answered(std::int32_t type, const std::string& path) const {
    std::lock_guard lk(mu_);
    const auto it = answered_.find({type, path});
    return it == answered_.end() ? 0 : it->second;
  }

  // The longest request frame of ZooKeeper opcode `op` (wire::kSetWatches,
  // ...) passed to a server so far, length prefix included; 0 for none.
  std::size_t largest_request(std::int32_t op) const {
    std::lock_guard lk(mu_);
    const auto it = largest_request_.find(op);
    return it == largest_request_.end() ? 0 : it->second;
  }

 private:
  struct Pair {
    int client = -1, server = -1;
    std::string pending;     // client bytes not forwarded yet: an incomplete frame
    bool handshaken = false; // the first frame (ConnectRequest) was forwarded
    bool in_sync = true;     // false once client bytes were dropped: frames unknown
    bool held = false;       // hold_on_request matched: pending waits for release_held
    bool gray = false;       // gray_cut: one side reset, the other's bytes swallowed
    std::string held_replies;  // hold_replies: server bytes not forwarded yet
    std::string reply_pending;       // server bytes not forwarded yet: an incomplete frame
    bool reply_handshaken = false;   // the first reply frame (ConnectResponse) was forwarded
    bool reply_in_sync = true;       // false once server frames could not be read
    std::unordered_map<std::int32_t, std::pair<std::int32_t, std::string>> asked;  // xid -> (type, path)
  };
  void set(bool& flag, bool on) {
    std::lock_guard lk(mu_);
    flag = on;
  }
  void wake() { (void)!::write(wake_[1], "x", 1); }
  // Arms the one-shot request rule and its action together: a request
  // arriving in between must never meet a half-armed rule.
  void arm(std::string path, int opcode, bool hold) {
    std::lock_guard lk(mu_);
    cut_path_ = std::move(path);
    cut_opcode_ = opcode;
    cut_armed_ = true;
    hold_not_cut_ = hold;
  }
  // Raises `flag` for the proxy thread and waits (bounded) until it counts
  // the request done in `done`.
  void ask_loop(bool& flag, std::uint64_t& done, const char* what) {
    std::unique_lock lk(mu_);
    const auto want = done + 1;
    flag = true;
    lk.unlock();
    wake();
    lk.lock();
    if (!cv_.wait_for(lk, std::chrono::seconds(5), [&] { return done >= want; }))
      throw std::runtime_error(std::string("proxy: ") + what + " timed out");
  }
  static void close_pair(Pair& p) {
    if (p.client >= 0) ::close(p.client);
    if (p.server >= 0) ::close(p.server);
    p.client = p.server = -1;
    p.pending.clear();
    p.reply_pending.clear();
    p.asked.clear();
  }
  // Closes `fd` with an RST (linger 0), not a FIN.
  static void reset_fd(int& fd) {
    if (fd < 0) return;
    linger l{1, 0};
    ::setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof l);
    ::close(fd);
    fd = -1;
  }
  static std::uint32_t be32(const char* b) {
    std::uint32_t v;
    std::memcpy(&v, b, 4);
    return ntohl(v);
  }
  // Opcodes whose request body opens with the node path (ZooKeeper 3.8).
  static bool path_first(int op) {
    switch (op) {
      case 1: case 2: case 3: case 4: case 5: case 6: case 7: case 8: case 9:  // create .. sync
      case 12: case 13: case 15:                                                // getChildren2, check, create2
      case 17: case 18: case 19: case 20: case 21:                              // checkWatches .. createTTL
      case 103: case 104: case 106:                                             // getEphemerals, getAllChildrenNumber, addWatch
        return true;
      default:
        return false;
    }
  }
  enum class Rule { none, cut, hold };
  // REQUIRES the proxy thread. Whether request frame `f` is of the opcode
  // cut_on_opcode() names (counted when it is).
  bool cuts_every(const std::string& f) {
    if (f.size() < 12) return false;
    const int op = static_cast<std::int32_t>(be32(f.data() + 8));
    std::lock_guard lk(mu_);
    if (cut_every_opcode_ < 0 || op != cut_every_opcode_) return false;
    ++opcode_cuts_;
    return true;
  }
  // REQUIRES the proxy thread. What to do with the frame `f` (length prefix
  // included): the armed rule's action if it is the request the rule waits
  // for (disarmed then), else none.
  Rule matches_rule(const std::string& f) {
    if (f.size() < 16) return Rule::none;  // len, xid, type, path length
    const int op = static_cast<std::int32_t>(be32(f.data() + 8));
    if (!path_first(op)) return Rule::none;
    const auto plen = static_cast<std::int32_t>(be32(f.data() + 12));
    if (plen < 0 || f.size() < 16 + static_cast<std::size_t>(plen)) return Rule::none;
    std::lock_guard lk(mu_);
    if (!cut_armed_ || (cut_opcode_ >= 0 && cut_opcode_ != op)) return Rule::none;
    if (f.compare(16, static_cast<std::size_t>(plen), cut_path_) != 0 || static_cast<std::size_t>(plen) != cut_path_.size())
      return Rule::none;
    cut_armed_ = false;
    if (hold_not_cut_) {
      ++request_holds_;
      return Rule::hold;
    }
    ++request_cuts_;
    last_cut_opcode_ = op;
    return Rule::cut;
  }
  // REQUIRES the proxy thread. Forwards every complete frame of p.pending,
  // unless one matches the armed rule: then the pair is closed there, or
  // held from that frame on.
  void forward_frames(Pair& p) {
    std::size_t at = 0;
    while (!p.held && p.pending.size() - at >= 4) {
      const std::size_t n = 4 + static_cast<std::size_t>(be32(p.pending.data() + at));
      if (n > (std::size_t{64} << 20)) {  // not ZooKeeper framing (a four-letter word?): pass raw from here on
        p.in_sync = false;
        break;
      }
      if (p.pending.size() - at < n) break;
      const std::string frame = p.pending.substr(at, n);
      const Rule rule = !p.handshaken ? Rule::none : cuts_every(frame) ? Rule::cut : matches_rule(frame);
      if (rule == Rule::hold) {
        p.held = true;
        break;
      }
      at += n;
      if (rule == Rule::cut) {
        close_pair(p);
        return;
      }
      if (p.handshaken) {  // remembered for its answer (forward_replies)
        const auto op = static_cast<std::int32_t>(be32(frame.data() + 8));
        if (auto h = wire::request_head(frame, path_first(op)); h && h->path) p.asked[h->xid] = {h->type, *h->path};
        std::lock_guard lk(mu_);
        auto& largest = largest_request_[op];
        largest = std::max(largest, frame.size());
      }
      p.handshaken = true;
      if (!write_all(p.server, frame.data(), static_cast<ssize_t>(frame.size()))) {
        close_pair(p);
        return;
      }
    }
    p.pending.erase(0, at);
    if (!p.in_sync && !p.pending.empty()) {
      if (!write_all(p.server, p.pending.data(), static_cast<ssize_t>(p.pending.size()))) close_pair(p);
      p.pending.clear();
    }
  }
  // REQUIRES the proxy thread. Forwards every complete frame of
  // p.reply_pending to the client, applying the armed reply rules.
  void forward_replies(Pair& p) {
    std::size_t at = 0;
    std::string out;
    while (p.reply_pending.size() - at >= 4) {
      const std::size_t n = 4 + static_cast<std::size_t>(be32(p.reply_pending.data() + at));
      if (n > (std::size_t{64} << 20)) {
        p.reply_in_sync = false;
        break;
      }
      if (p.reply_pending.size() - at < n) break;
      std::string frame = p.reply_pending.substr(at, n);
      at += n;
      if (p.reply_handshaken && !keep_reply(p, frame)) continue;
      p.reply_handshaken = true;
      out += frame;
    }
    p.reply_pending.erase(0, at);
    if (!p.reply_in_sync) {
      out += p.reply_pending;
      p.reply_pending.clear();
    }
    if (!out.empty() && !write_all(p.client, out.data(), static_cast<ssize_t>(out.size()))) close_pair(p);
  }
  // REQUIRES the proxy thread. False to swallow `frame`; it may rewrite it.
  bool keep_reply(Pair& p, std::string& frame) {
    if (auto note = wire::notification(frame)) {
      std::lock_guard lk(mu_);
      if (drop_armed_ && note->type == drop_type_ && note->path == drop_path_) {
        drop_armed_ = false;
        ++wire_.notifications_dropped;
        return false;
      }
      ++wire_.notifications_passed;
      return true;
    }
    const auto h = wire::reply_head(frame);
    if (!h) return true;
    const auto it = p.asked.find(h->xid);
    if (it == p.asked.end()) return true;
    const auto [type, path] = std::move(it->second);
    p.asked.erase(it);
    std::lock_guard lk(mu_);
    if (h->err == 0) ++answered_[{type, path}];
    if (!ghost_armed_) return true;
    if ((type == wire::kGetChildren || type == wire::kGetChildren2) && path == ghost_path_) {
      if (auto rewritten = wire::with_extra_child(frame, ghost_child_)) {
        frame = std::move(*rewritten);
        ++wire_.listings_rewritten;
      }
    } else if (type == wire::kGetData && path == ghost_path_ + "/" + ghost_child_) {
      if (auto rewritten = wire::as_empty_node(frame)) {
        frame = std::move(*rewritten);
        ++wire_.reads_rewritten;
      }
    }
    return true;
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
      bool drop_rep, drop_req, refuse, release = false, hold_rep;
      {
        std::lock_guard lk(mu_);
        if (stop_) return;
        std::swap(release, release_requested_);
        if (gray_requested_) {
          for (auto& p : pairs_) {
            p.gray = true;
            reset_fd(gray_reset_ == Side::client ? p.client : p.server);
          }
          gray_ = true;
          gray_requested_ = false;
          ++grays_done_;
          cv_.notify_all();
        }
        if (heal_requested_) {
          for (auto& p : pairs_) {
            if (p.gray) close_pair(p);
          }
          gray_ = false;
          heal_requested_ = false;
          ++heals_done_;
          cv_.notify_all();
        }
        if (flush_requested_) {
          for (auto& p : pairs_) {
            if (p.client >= 0 && !p.held_replies.empty()) {
              if (!raw_ && p.reply_in_sync) {
                p.reply_pending += p.held_replies;
                forward_replies(p);
              } else if (!write_all(p.client, p.held_replies.data(), static_cast<ssize_t>(p.held_replies.size()))) {
                close_pair(p);
              }
            }
            p.held_replies.clear();
          }
          hold_replies_ = false;
          flush_requested_ = false;
          ++flushes_done_;
          cv_.notify_all();
        }
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
        hold_rep = hold_replies_;
      }
      if (release) {
        for (auto& p : pairs_) {
          if (!p.held) continue;
          p.held = false;
          forward_frames(p);
        }
        std::lock_guard lk(mu_);
        ++releases_done_;
        cv_.notify_all();
      }
      const std::size_t polled = (fds.size() - 2) / 2;
      for (std::size_t i = 0; i < polled; ++i) {
        auto& p = pairs_[i];
        if (p.gray) {  // the open side's bytes are swallowed; it may only close
          for (int dir = 0; dir < 2; ++dir) {
            int& fd = dir == 0 ? p.client : p.server;
            if (fd < 0 || !(fds[2 + 2 * i + static_cast<std::size_t>(dir)].revents & (POLLIN | POLLHUP | POLLERR)))
              continue;
            if (::read(fd, buf, sizeof buf) <= 0) {
              ::close(fd);
              fd = -1;
            }
          }
          continue;
        }
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
            p.in_sync = false;
            std::lock_guard lk(mu_);
            dropped_requests_ += static_cast<std::size_t>(n);
          } else if (dir == 0 && p.in_sync) {
            p.pending.append(buf, static_cast<std::size_t>(n));
            forward_frames(p);
          } else if (dir == 1 && hold_rep && !drop_rep) {
            p.held_replies.append(buf, static_cast<std::size_t>(n));
          } else if (dir == 1 && !drop_rep && !raw_ && p.reply_in_sync) {
            p.reply_pending.append(buf, static_cast<std::size_t>(n));
            forward_replies(p);
          } else if (!(dir == 1 && drop_rep) && !write_all(to, buf, n)) {
            close_pair(p);
          }
        }
      }
      std::erase_if(pairs_, [](const Pair& p) { return p.client < 0 && p.server < 0; });
      if (fds[1].revents & POLLIN) {
        int c = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
        bool gray;
        {
          std::lock_guard lk(mu_);
          gray = gray_;
        }
        if (c >= 0 && gray) {
          reset_fd(c);
        } else if (c >= 0) {
          const int s = refuse ? -1 : connect_target();
          if (s < 0) ::close(c);
          else {
            pairs_.push_back({c, s, {}, false, !raw_, false});
            std::lock_guard lk(mu_);
            ++connections_;
          }
        }
      }
    }
  }

  const int target_;
  const bool raw_;
  const std::string listen_ip_;
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
  std::size_t connections_ = 0;                                                      // GUARDED_BY(mu_)
  std::string cut_path_;                                                             // GUARDED_BY(mu_)
  int cut_opcode_ = -1, last_cut_opcode_ = 0;                                        // GUARDED_BY(mu_)
  bool cut_armed_ = false;                                                           // GUARDED_BY(mu_)
  std::uint64_t request_cuts_ = 0;                                                   // GUARDED_BY(mu_)
  int cut_every_opcode_ = -1;                                                        // GUARDED_BY(mu_)
  std::uint64_t opcode_cuts_ = 0;                                                    // GUARDED_BY(mu_)
  bool hold_not_cut_ = false;       // the armed rule holds instead of cutting. GUARDED_BY(mu_)
  bool release_requested_ = false;  // GUARDED_BY(mu_)
  std::uint64_t releases_done_ = 0, request_holds_ = 0;  // GUARDED_BY(mu_)
  Side gray_reset_ = Side::client;                                 // GUARDED_BY(mu_)
  bool gray_ = false, gray_requested_ = false, heal_requested_ = false;  // GUARDED_BY(mu_)
  bool hold_replies_ = false, flush_requested_ = false;            // GUARDED_BY(mu_)
  std::uint64_t grays_done_ = 0, heals_done_ = 0, flushes_done_ = 0;  // GUARDED_BY(mu_)
  std::int32_t drop_type_ = 0;                                     // GUARDED_BY(mu_)
  std::string drop_path_, ghost_path_, ghost_child_;               // GUARDED_BY(mu_)
  bool drop_armed_ = false, ghost_armed_ = false;                  // GUARDED_BY(mu_)
  WireCounts wire_;                                                // GUARDED_BY(mu_)
  std::map<std::pair<std::int32_t, std::string>, std::uint64_t> answered_;  // GUARDED_BY(mu_)
  std::map<std::int32_t, std::size_t> largest_request_;  // GUARDED_BY(mu_)
  std::thread thread_;
};

}  // namespace zklock::test
