// Loopback ports and ZooKeeper's four-letter words (ruok, srvr, conf, mntr):
// how the harness picks ports and sees whether a server serves.
//
// May be called from any thread.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>

#include "harness_base.hpp"

namespace zklock::test {

// A TCP port on 127.0.0.1 that nothing was bound to when checked.  Never the
// same port twice within one process.  Another process may still take it
// before the caller binds; ZkServer detects that and retries on a new port.
int free_loopback_port();

// Sends a four-letter word ("ruok", "srvr", "mntr", "conf", ...) and returns
// the whole answer, or nullopt if no connection or no complete answer came
// within `timeout`.  Never throws for network reasons.
std::optional<std::string> four_letter_word(const std::string& host, int port,
                                            std::string_view word,
                                            milliseconds timeout = milliseconds(2000));

// The server's last zxid, from `srvr` ("Zxid: 0x..."): one more per write
// transaction it applied. -1 when it does not answer.
std::int64_t last_zxid(const std::string& host, int port);

// The `mntr` answer, one entry per line ("key<TAB>value").
//
// What Debian's 3.8.0 prints (checked on this package): ~500 keys, every value
// an integer except zk_version, zk_server_state and the zk_avg_* averages.
// Traffic counters, all cumulative since server start:
//   zk_packets_received, zk_packets_sent   packets from / to clients
//   zk_bytes_received_count                bytes received from clients
//   zk_response_bytes                      bytes of responses sent to clients
//   zk_watch_bytes                         bytes of watch notifications sent
//   zk_last/min/max_client_response_size   one response's size (-1 before any)
// There is no separate "bytes sent" key: client-bound bytes are
// zk_response_bytes + zk_watch_bytes.  Also useful: zk_num_alive_connections,
// zk_outstanding_requests, zk_znode_count, zk_ephemerals_count, zk_watch_count,
// zk_approximate_data_size, zk_server_state (standalone/leader/follower),
// zk_digest_mismatches_count, and latency summaries (zk_{avg,min,max,cnt,sum}_*,
// zk_p50/p95/p99/p999_*, e.g. zk_p99_updatelatency).
struct Mntr {
  std::map<std::string, std::string> values;  // key -> raw text

  // The value of `key` if present and an integer (counters, gauges).
  std::optional<std::int64_t> counter(std::string_view key) const;
  // The raw text of `key` if present (e.g. zk_server_state, zk_version).
  std::optional<std::string> text(std::string_view key) const;
};
Mntr parse_mntr(std::string_view text);

}  // namespace zklock::test
