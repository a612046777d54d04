// ZooKeeper's client wire protocol, as far as the fault proxy reads and
// rewrites it (jute, big-endian; ZooKeeper 3.8). Pure functions on whole
// frames: a 4-byte length, then that many bytes.
//
//   request frame  len | xid i32 | type i32 | body (for most types the path first)
//   reply frame    len | xid i32 | zxid i64 | err i32 | body
//   notification   a reply frame with xid -1, body WatcherEvent:
//                  type i32 | state i32 | path (i32 length, bytes)
//   getChildren    reply body: count i32, then count strings (getChildren2: then a Stat)
//   getData        reply body: data (i32 length, bytes), Stat
//
// The first frame each way (ConnectRequest, ConnectResponse) has no header.
#pragma once

#include <arpa/inet.h>

#include <cstdint>
#include <cstring>
#include <optional>
#include <string>

namespace zklock::test::wire {

// WatcherEvent types (Watcher.Event.EventType).
enum EventType : std::int32_t { kCreated = 1, kDeleted = 2, kDataChanged = 3, kChildrenChanged = 4 };
// OpCode values the proxy looks at.
enum OpCode : std::int32_t { kGetData = 4, kGetChildren = 8, kGetChildren2 = 12, kSetWatches = 101 };
constexpr std::size_t kReplyHeader = 4 + 4 + 8 + 4;  // len, xid, zxid, err

inline std::int32_t i32(const std::string& f, std::size_t at) {
  std::uint32_t v;
  std::memcpy(&v, f.data() + at, 4);
  return static_cast<std::int32_t>(ntohl(v));
}
inline void put_i32(std::string& f, std::size_t at, std::int32_t v) {
  const std::uint32_t n = htonl(static_cast<std::uint32_t>(v));
  std::memcpy(f.data() + at, &n, 4);
}
inline std::string be_i32(std::int32_t v) {
  std::string s(4, '\0');
  put_i32(s, 0, v);
  return s;
}

// A request's xid, type and (for types whose body opens with one) path.
struct RequestHead {
  std::int32_t xid = 0, type = 0;
  std::optional<std::string> path;
};
inline std::optional<RequestHead> request_head(const std::string& f, bool path_first) {
  if (f.size() < 12) return std::nullopt;
  RequestHead h{i32(f, 4), i32(f, 8), std::nullopt};
  if (path_first && f.size() >= 16) {
    const auto len = i32(f, 12);
    if (len >= 0 && f.size() >= 16 + static_cast<std::size_t>(len)) h.path = f.substr(16, static_cast<std::size_t>(len));
  }
  return h;
}

struct ReplyHead {
  std::int32_t xid = 0, err = 0;
};
inline std::optional<ReplyHead> reply_head(const std::string& f) {
  if (f.size() < kReplyHeader) return std::nullopt;
  return ReplyHead{i32(f, 4), i32(f, 16)};
}

struct Notification {
  std::int32_t type = 0, state = 0;
  std::string path;
};
// The watcher event of a notification frame (xid -1), else nullopt.
inline std::optional<Notification> notification(const std::string& f) {
  const auto h = reply_head(f);
  if (!h || h->xid != -1 || f.size() < kReplyHeader + 12) return std::nullopt;
  const auto len = i32(f, kReplyHeader + 8);
  if (len < 0 || f.size() < kReplyHeader + 12 + static_cast<std::size_t>(len)) return std::nullopt;
  return Notification{i32(f, kReplyHeader), i32(f, kReplyHeader + 4), f.substr(kReplyHeader + 12, static_cast<std::size_t>(len))};
}

// A getChildren(2) reply frame with `child` added after the listed ones;
// nullopt when the frame does not parse as one (or reports an error).
inline std::optional<std::string> with_extra_child(const std::string& f, const std::string& child) {
  const auto h = reply_head(f);
  if (!h || h->err != 0 || f.size() < kReplyHeader + 4) return std::nullopt;
  const auto count = i32(f, kReplyHeader);
  if (count < 0) return std::nullopt;
  std::size_t at = kReplyHeader + 4;
  for (std::int32_t i = 0; i < count; ++i) {
    if (f.size() < at + 4) return std::nullopt;
    const auto len = i32(f, at);
    if (len < 0 || f.size() < at + 4 + static_cast<std::size_t>(len)) return std::nullopt;
    at += 4 + static_cast<std::size_t>(len);
  }
  std::string out = f.substr(0, at) + be_i32(static_cast<std::int32_t>(child.size())) + child + f.substr(at);
  put_i32(out, kReplyHeader, count + 1);
  put_i32(out, 0, static_cast<std::int32_t>(out.size() - 4));
  return out;
}

// A getData reply frame that said "no node" (ZNONODE, -101) made to answer
// empty data and an all-zero Stat instead; nullopt for any other frame.
inline std::optional<std::string> as_empty_node(const std::string& f) {
  const auto h = reply_head(f);
  if (!h || h->err != -101) return std::nullopt;
  constexpr std::size_t kStat = 8 * 4 + 4 * 3 + 8 + 4 * 2 + 8;  // Stat: czxid .. pzxid
  std::string out = f.substr(0, kReplyHeader) + be_i32(0) + std::string(kStat, '\0');
  put_i32(out, 16, 0);                                          // err: ok
  put_i32(out, 0, static_cast<std::int32_t>(out.size() - 4));  // frame length
  return out;
}

}  // namespace zklock::test::wire
