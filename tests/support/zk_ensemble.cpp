// ZkEnsemble: three ZkServer members forming one quorum on loopback.
#include "zk_server.hpp"

#include <fstream>

namespace zklock::test {

using detail::poll_pause;

ZkEnsemble::ZkEnsemble(ZkServerOptions base) {
  std::vector<std::string> lines;
  std::vector<int> client_ports;
  for (int id = 1; id <= kSize; ++id) {
    int quorum = free_loopback_port();
    int election = free_loopback_port();
    lines.push_back("server." + std::to_string(id) + "=127.0.0.1:" + std::to_string(quorum) + ":" +
                    std::to_string(election));
    client_ports.push_back(free_loopback_port());
  }
  for (int id = 1; id <= kSize; ++id) {
    ZkServerOptions o = base;
    o.my_id = id;
    o.server_lines = lines;
    o.port = client_ports[static_cast<std::size_t>(id - 1)];
    if (!base.dir.empty()) o.dir = base.dir / std::to_string(id);
    members_.push_back(std::make_unique<ZkServer>(o));
  }
  if (!base.dir.empty()) {
    std::ofstream connect(base.dir / "connect", std::ios::trunc);
    connect << connect_string() << "\n";
    if (!connect) throw HarnessError("cannot write " + (base.dir / "connect").string());
  }
}

ZkEnsemble ZkEnsemble::open(const std::filesystem::path& dir, const ZkServerOptions& how) {
  std::vector<std::unique_ptr<ZkServer>> members;
  for (int id = 1; id <= kSize; ++id) members.push_back(ZkServer::open(dir / std::to_string(id), how));
  return ZkEnsemble(std::move(members));
}

void ZkEnsemble::start() {
  for (auto& m : members_) {
    if (!m->running()) m->launch();
  }
  wait_serving(kSize, Clock::now() + members_.front()->options().ready_timeout);
}

void ZkEnsemble::wait_serving(int count, Clock::time_point deadline) {
  while (true) {
    int serving = 0;
    std::string state;
    for (std::size_t i = 0; i < members_.size(); ++i) {
      auto& m = *members_[i];
      std::string mode = "down";
      if (m.running() && !m.paused()) {
        auto srvr = four_letter_word("127.0.0.1", m.port(), "srvr", milliseconds(500));
        if (srvr && srvr->find("Mode: leader") != std::string::npos) mode = "leader";
        else if (srvr && srvr->find("Mode: follower") != std::string::npos) mode = "follower";
        else mode = "not serving";
      } else if (m.paused()) {
        mode = "paused";
      }
      if (mode == "leader" || mode == "follower") ++serving;
      state += " member" + std::to_string(i) + "=" + mode;
    }
    if (serving >= count) return;
    if (Clock::now() >= deadline) {
      std::string logs;
      for (auto& m : members_) logs += "--- " + m->connect_string() + " ---\n" + m->log_tail(15);
      throw HarnessError("ensemble: " + std::to_string(serving) + " of " + std::to_string(count) +
                         " members serving by the deadline:" + state + "\n" + logs);
    }
    poll_pause(deadline);
  }
}

void ZkEnsemble::stop() {
  for (auto& m : members_) m->stop();
}

std::string ZkEnsemble::connect_string() const {
  std::string out;
  for (auto& m : members_) out += (out.empty() ? "" : ",") + m->connect_string();
  return out;
}

std::optional<int> ZkEnsemble::leader_index() {
  for (std::size_t i = 0; i < members_.size(); ++i) {
    auto& m = *members_[i];
    if (!m.running() || m.paused()) continue;
    auto srvr = four_letter_word("127.0.0.1", m.port(), "srvr", milliseconds(500));
    if (srvr && srvr->find("Mode: leader") != std::string::npos) return static_cast<int>(i);
  }
  return std::nullopt;
}

}  // namespace zklock::test
