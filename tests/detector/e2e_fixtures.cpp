// The end-to-end detector tests' shared fixtures (e2e_fixtures.hpp).
#include "e2e_fixtures.hpp"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <regex>
#include <sstream>
#include <stdexcept>

#include "zklock/protocol/node_name.hpp"

namespace zklock::detector::e2e {

using namespace std::chrono_literals;

double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

ClientOptions session(const std::string& connect, std::optional<DigestCredentials> creds) {
  ClientOptions o;
  o.connect = connect;
  o.session_timeout = 4s;
  o.credentials = std::move(creds);
  return o;
}

// ---------------------------------------------------------------------------
// Owners acting through the real lock

Actor::~Actor() {
  stop_.request_stop();
  for (auto& r : requests_) {
    r.wait(10s);
    // Leases granted but never kept are released here, on the test thread,
    // not wherever the last copy of the request happens to die.
    if (auto l = r.take_lease()) leases_.push_back(std::move(l));
  }
  release_all();
}

Request Actor::start(const std::string& lock, Mode mode) {
  Request r;
  AcquireOptions o{.owner = owner_, .priority = priority_, .description = "e2e"};
  if (read_write_ || mode == Mode::shared) {
    auto& m = *shared_.emplace_back(std::make_unique<FairSharedMutex>(client_, lock));
    if (mode == Mode::shared) m.acquire_shared_async(r.callback(), o, 0ms, stop_.get_token());
    else m.acquire_async(r.callback(), o, 0ms, stop_.get_token());
  } else {
    auto& m = *mutexes_.emplace_back(std::make_unique<FairMutex>(client_, lock));
    m.acquire_async(r.callback(), o, 0ms, stop_.get_token());
  }
  requests_.push_back(r);
  return r;
}

void Actor::hold(const std::string& lock, Mode mode) {
  auto r = start(lock, mode);
  require(r.wait(20s), owner_ + " was not granted " + lock + " within 20 s");
  require(r.granted(), owner_ + " could not take " + lock + ": " + r.message());
  leases_.push_back(r.take_lease());
}

Request Actor::enqueue(const std::string& lock, Mode mode) {
  const auto before = own_nodes(lock);
  auto r = start(lock, mode);
  require(eventually([&] { return own_nodes(lock) > before || r.done(); }, 20s),
          owner_ + "'s node on " + lock + " did not appear");
  require(!r.done() || !r.granted(), owner_ + " was granted " + lock + " at once: no wait to deadlock on");
  return r;
}

std::size_t Actor::own_nodes(const std::string& lock) {
  const auto key = protocol::owner_key(owner_);
  std::size_t n = 0;
  try {
    for (const auto& c : client_.children(lock)) {
      if (auto p = protocol::parse_lock_node_name(c); p && p->owner_key == key) ++n;
    }
  } catch (const Error& e) {
    if (e.code() != Errc::no_node) throw;
  }
  return n;
}

CrossOrder cross_order(Actor& a, Actor& b, const std::string& x, const std::string& y) {
  CrossOrder c;
  a.hold(x);
  b.hold(y);
  c.a_waits = a.enqueue(y);
  c.closed = Clock::now();
  c.b_waits = b.enqueue(x);
  return c;
}

void expect_victim(const Request& r, Clock::time_point closed, const std::string& cycle, milliseconds bound,
                   const std::string& label) {
  ASSERT_TRUE(r.wait(bound + 10s)) << label << ": the victim's acquire never failed";
  ASSERT_EQ(r.error(), Errc::deadlock_victim) << label << ": " << r.message();
  EXPECT_NE(r.message().find(cycle), std::string::npos) << "expected the cycle " << cycle << " in: " << r.message();
  const auto latency = r.at() - closed;
  std::printf("[ latency  ] %s: victim's acquire failed %.3f s after the cycle closed (bound %.3f s)\n",
              label.c_str(), secs(latency), secs(bound));
  EXPECT_LE(latency, bound) << label;
}

void expect_granted(const Request& r, const std::string& label) {
  ASSERT_TRUE(r.wait(15s)) << label << ": still waiting";
  EXPECT_TRUE(r.granted()) << label << ": " << r.message();
}

// ---------------------------------------------------------------------------
// The detector in-process

DetectorConfig config(const std::string& zk, const std::string& root, const std::string& id) {
  DetectorConfig cfg;
  cfg.zk = zk;
  cfg.root = root;
  cfg.interval = 200ms;
  cfg.min_wait = 500ms;
  cfg.session_timeout = 4s;
  cfg.id = id;
  return cfg;
}

void print_report(const CycleReport& r, const DetectorConfig& cfg, const std::string& label) {
  const auto bound = latency_bound(cfg.min_wait, cfg.interval);
  std::printf("[ latency  ] %s: detector broke %s (victim %s), detection latency %.3f s (bound %.3f s)\n",
              label.c_str(), r.text.c_str(), r.victim.owner.c_str(), r.latency_seconds, secs(bound));
  EXPECT_LE(r.latency_seconds, secs(bound)) << label;
}

void expect_revoked(Running& run, const std::string& victim, const std::string& label) {
  const auto revoked = run.wait_for("revoked", 1, 15s);
  ASSERT_EQ(revoked.size(), 1u) << label << ": no revocation";
  EXPECT_EQ(revoked[0].victim.owner, victim) << label;
  print_report(revoked[0], run.cfg(), label);
}

// ---------------------------------------------------------------------------
// The detector binary

DetectorProcess::DetectorProcess(const fs::path& dir, const std::string& name, std::vector<std::string> args)
    : log_(dir / (name + ".log")) {
  test::SpawnOptions so;
  so.argv = {ZKLOCK_DETECTOR_BINARY, "--metrics-port", "0", "--log-level", "debug"};
  so.argv.insert(so.argv.end(), args.begin(), args.end());
  so.output_file = log_;
  so.capture_stdout = false;
  child_ = test::ChildProcess::spawn(so);
}

std::optional<std::string> DetectorProcess::wait_line(const std::vector<std::string>& needles,
                                                      milliseconds timeout) const {
  std::optional<std::string> found;
  eventually(
      [&] {
        std::istringstream in(log());
        for (std::string line; std::getline(in, line);) {
          if (std::all_of(needles.begin(), needles.end(),
                          [&](const std::string& n) { return line.find(n) != std::string::npos; })) {
            found = line;
            return true;
          }
        }
        return false;
      },
      timeout);
  return found;
}

std::optional<double> logged_latency(const std::string& line) {
  static const std::regex re("detection latency ([0-9.]+) s");
  std::smatch m;
  if (!std::regex_search(line, m, re)) return std::nullopt;
  return std::stod(m[1]);
}

void print_logged_latency(const std::string& line, milliseconds bound, const std::string& label) {
  const auto latency = logged_latency(line);
  ASSERT_TRUE(latency) << line;
  std::printf("[ latency  ] %s: detector logged detection latency %.3f s (bound %.3f s)\n", label.c_str(), *latency,
              secs(bound));
  EXPECT_LE(*latency, secs(bound)) << line;
}

std::vector<std::string> detector_args(const std::string& zk, const std::string& root, const std::string& id) {
  return {"--zk", zk, "--root", root, "--min-wait", "500ms", "--interval", "200ms", "--session-timeout", "4s",
          "--id", id};
}

std::optional<std::string> candidate_of(Client& c, const std::string& id) {
  for (const auto& name : c.children(std::string(kElectionPath))) {
    const auto path = std::string(kElectionPath) + "/" + name;
    if (c.try_get(path) == id) return path;
  }
  return std::nullopt;
}

}  // namespace zklock::detector::e2e
