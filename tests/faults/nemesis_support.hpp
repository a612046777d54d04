// The nemesis run's pieces (tests/faults/nemesis_test.cpp): a three-server
// ensemble whose every peer link and client link passes through a fault
// proxy, and the contender processes with what they reported.
#pragma once

#include <array>
#include <memory>
#include <string>
#include <vector>

#include "fault_proxy.hpp"
#include "story_support.hpp"

namespace zklock::stories {

using test::FaultProxy;
using test::ZkServer;
using test::ZkServerOptions;

// Three members. Member i reaches member j's quorum and election ports
// through its own pair of raw proxies (i's zoo.cfg names the proxies as j's
// address; its own line names its real ports, which it binds), so any member
// -- the leader included -- can be cut off from its peers while its client
// port keeps serving. Clients reach member i through client_proxy(i), which
// cut() uses to drop every client connection to that member.
class NemesisEnsemble {
 public:
  static constexpr int kSize = 3;

  explicit NemesisEnsemble(milliseconds tick) {
    int quorum[kSize], election[kSize], client[kSize];
    for (int i = 0; i < kSize; ++i) {
      quorum[i] = test::free_loopback_port();
      election[i] = test::free_loopback_port();
      client[i] = test::free_loopback_port();
    }
    for (int i = 0; i < kSize; ++i) {
      std::vector<std::string> lines;
      for (int j = 0; j < kSize; ++j) {
        int q = quorum[j], e = election[j];
        if (j != i) {
          links_[i][j][0] = std::make_unique<FaultProxy>(quorum[j], FaultProxy::Framing::raw);
          links_[i][j][1] = std::make_unique<FaultProxy>(election[j], FaultProxy::Framing::raw);
          q = links_[i][j][0]->port();
          e = links_[i][j][1]->port();
        }
        lines.push_back("server." + std::to_string(j + 1) + "=127.0.0.1:" + std::to_string(q) + ":" +
                        std::to_string(e));
      }
      ZkServerOptions o;
      o.my_id = i + 1;
      o.port = client[i];
      o.tick = tick;
      o.server_lines = lines;
      // forceSync as in production; 4 MB log preallocation instead of 64 MB,
      // so the evidence a failing run keeps stays small.
      o.extra_config = {"forceSync=yes", "preAllocSize=4096"};
      members_.push_back(std::make_unique<ZkServer>(o));
      clients_.push_back(std::make_unique<FaultProxy>(client[i]));
    }
  }

  void start() {
    for (auto& m : members_) m->launch();
    for (int i = 0; i < kSize; ++i) wait_serving(i, 60000ms);
  }
  ZkServer& member(int i) { return *members_.at(static_cast<std::size_t>(i)); }
  FaultProxy& client_proxy(int i) { return *clients_.at(static_cast<std::size_t>(i)); }

  // "leader", "follower", or what else `srvr` says ("down", "none").
  std::string mode_of(int i) {
    auto& m = member(i);
    if (!m.running() || m.paused()) return "down";
    auto srvr = test::four_letter_word("127.0.0.1", m.port(), "srvr", 500ms).value_or("");
    if (srvr.find("Mode: leader") != std::string::npos) return "leader";
    if (srvr.find("Mode: follower") != std::string::npos) return "follower";
    return "none";
  }
  int leader() {
    for (int i = 0; i < kSize; ++i) {
      if (mode_of(i) == "leader") return i;
    }
    return -1;
  }
  bool serving(int i) {
    const auto m = mode_of(i);
    return m == "leader" || m == "follower";
  }
  void wait_serving(int i, milliseconds timeout) {
    if (!eventually([&] { return serving(i); }, timeout))
      throw StoryError("member " + std::to_string(i) + " not serving within " + std::to_string(timeout.count()) +
                       " ms (" + mode_of(i) + ")\n" + member(i).log_tail(20));
  }
  // Blackholes every peer link to and from member k. Undoing it also cuts
  // those links: a blackholed stream lost bytes mid-message, which TCP never
  // does, so the peers start again on fresh connections (as after a
  // partition long enough for their own timeouts).
  void isolate(int k, bool on) {
    for (int i = 0; i < kSize; ++i) {
      for (int j = 0; j < kSize; ++j) {
        if (i == j || (i != k && j != k)) continue;
        for (auto& p : links_[i][j]) {
          p->blackhole(on);
          if (!on) p->cut();
        }
      }
    }
  }
  // The client connect string: every member, through its client proxy.
  std::string proxied_connect() const {
    std::string out;
    for (auto& p : clients_) out += (out.empty() ? "" : ",") + p->connect_string();
    return out;
  }
  std::string direct_connect() const {
    std::string out;
    for (auto& m : members_) out += (out.empty() ? "" : ",") + m->connect_string();
    return out;
  }

 private:
  // Proxies outlive the servers (declared first, destroyed last).
  std::array<std::array<std::array<std::unique_ptr<FaultProxy>, 2>, kSize>, kSize> links_;
  std::vector<std::unique_ptr<FaultProxy>> clients_;
  std::vector<std::unique_ptr<ZkServer>> members_;
};

// One grant as its contender reported it (tests/worker/nemesis_mode.cpp).
struct Grant {
  int contender = -1;
  std::int64_t czxid = 0;
  std::int64_t granted_at = 0;  // after try_acquire_for returned
  bool valid_at_grant = false;
  bool released = false;
  std::int64_t first_valid = -1, last_valid = -1, first_invalid = -1, rel_start = -1;
  bool revalid = false;
};

// zklock_test_worker nemesis as a child process, and its events.
struct Contender {
  int index = 0;
  std::string name;
  std::filesystem::path stderr_file;
  ChildProcess proc;
  std::vector<Event> events;
  std::vector<std::size_t> grants;  // indexes into the run's grant table
  std::int64_t last_grant_at = -1;
  bool holding = false;
  std::string session;                   // the current session, as last reported
  bool connected = false;                // its last session event says connected
  std::int64_t connected_since = 0;      // ...since this instant
  int clients = 0, timeouts = 0, errors = 0;
  bool idle = false;

  static Contender spawn(int index, const std::string& connect, const std::string& lock, int session_ms,
                         int retain_ms, const std::filesystem::path& dir) {
    Contender c;
    c.index = index;
    c.name = "c" + std::to_string(index + 1);
    c.stderr_file = dir / (c.name + ".stderr");
    SpawnOptions o;
    o.argv = {ZKLOCK_TEST_WORKER, "nemesis", "--connect", connect, "--lock", lock, "--name", c.name,
              "--session-timeout", std::to_string(session_ms), "--retain-ms", std::to_string(retain_ms),
              "--stderr", c.stderr_file.string()};
    c.proc = ChildProcess::spawn(o);
    return c;
  }
  // Reads what arrived; `on_event` sees each event after the bookkeeping.
  template <class F>
  void pump(F&& on_event) {
    while (auto line = proc.read_line(0ms)) {
      Event e = parse_event(*line);
      e.worker = name;
      if (e.kind == "client") {
        ++clients;
        session = e.get("session");
        connected = true;
        connected_since = e.t_us;
      } else if (e.kind == "state") {
        const auto s = e.get("s");
        session = e.get("session");
        const bool now = s == "connected" || s == "reconnected";
        if (now && !connected) connected_since = e.t_us;
        connected = now;
      } else if (e.kind == "timeout") {
        ++timeouts;
      } else if (e.kind == "acquire_error") {
        ++errors;
      } else if (e.kind == "idle") {
        idle = true;
      }
      events.push_back(e);
      on_event(*this, events.back());
    }
  }
};

}  // namespace zklock::stories
