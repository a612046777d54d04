// A session forced into a reconnect loop is reported and ended.
//
// The loop is made as a server makes it: the fault proxy cuts every
// connection on which the client sends SetWatches (opcode 101), as a server
// closes one whose SetWatches packet exceeds its jute.maxbuffer. The
// handshake before it re-validates the session, so the session never
// expires by itself: on the code before the rule (lib/src/reconnect_loop.hpp)
// this story ran until its deadline with the same session, its ephemeral node
// kept on the server, and nothing said why.
#include <gtest/gtest.h>

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <atomic>
#include <cstdio>
#include <mutex>
#include <sstream>

#include "fault_proxy.hpp"
#include "zk_harness.hpp"
#include "zklock/client.hpp"
#include "zklock/fair_mutex.hpp"

namespace zklock::test {
namespace {

using namespace std::chrono_literals;

class LoopObserver final : public LockObserver {
 public:
  void reconnect_loop(std::int64_t session_id, std::string_view cause) override {
    std::lock_guard lk(mu);
    ++loops;
    looped_session = session_id;
    last_cause = std::string(cause);
  }
  std::mutex mu;
  int loops = 0;                  // GUARDED_BY(mu)
  std::int64_t looped_session = 0;  // GUARDED_BY(mu)
  std::string last_cause;         // GUARDED_BY(mu)
};

std::size_t count_of(const std::string& text, const std::string& needle) {
  std::size_t n = 0;
  for (auto at = text.find(needle); at != std::string::npos; at = text.find(needle, at + needle.size())) ++n;
  return n;
}

TEST(ReconnectLoop, ASessionWhoseConnectionsCloseBeforeAnyAnswerIsReportedAndEnded) {
  auto& zk = shared_server();
  FaultProxy proxy(zk.port());
  // The client's log, to count the loop's line.
  std::ostringstream log_text;
  auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(log_text);
  const std::string logger_name = "reconnect-loop-test";
  spdlog::drop(logger_name);
  spdlog::register_logger(std::make_shared<spdlog::logger>(logger_name, sink));
  auto observer = std::make_shared<LoopObserver>();

  ClientOptions o;
  o.connect = proxy.connect_string();
  o.session_timeout = 2000ms;
  o.logger = logger_name;
  o.observer = observer;
  Client c(o);
  Client direct({.connect = zk.connect_string()});
  const auto first_session = c.session_id();
  const auto timeout = c.negotiated_timeout();

  // What the looping session owns: an ephemeral node, a held lease, a watch
  // (without one the C client sends no SetWatches, and nothing loops).
  const auto node = unique_path("loop-ephemeral");
  c.create(node, "", CreateMode::ephemeral);
  FairMutex m(c, unique_lock_path("loop-lease"));
  auto lease = m.acquire();
  std::atomic<int> lost{0};
  lease.on_lost([&](LossReason, const std::string&) { lost.fetch_add(1); });
  c.stat_async(node, [](const WatchEvent&) {}, [](Status, const Stat&) {});
  c.stat(node);  // answered after the watch's request: the watch is set

  proxy.cut_on_opcode(wire::kSetWatches);
  const auto cut_at = Clock::now();
  proxy.cut();

  // The rule: 3 connections or more, over one negotiated session timeout.
  // Each lap is a reconnect (under a second here); 30 s is a generous deadline.
  ASSERT_TRUE(eventually([&] { return c.reconnect_loops_seen() == 1; }, 30s))
      << "no reconnect loop reported after " << proxy.opcode_cuts() << " connections cut on SetWatches\n"
      << log_text.str();
  const auto noticed_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - cut_at).count();
  const auto laps = proxy.opcode_cuts();
  EXPECT_GE(laps, 3u);
  EXPECT_GE(noticed_ms, timeout.count()) << "reported before the bound";

  // Ended: a new session (no watches, so no SetWatches: it connects), the
  // lease reported lost, and the old session's node gone once the server
  // expires the session that is no longer re-validated.
  ASSERT_TRUE(eventually([&] { return c.session_epoch() == 2 && c.connected(); }, 10s));
  EXPECT_NE(c.session_id(), first_session);
  EXPECT_TRUE(eventually([&] { return lost.load() == 1; }, 5s)) << "the lease was not reported lost";
  const auto ended_at = Clock::now();
  ASSERT_TRUE(eventually([&] { return !direct.try_stat(node).has_value(); }, timeout + 10s))
      << "the looping session's ephemeral node outlived it";
  const auto gone_ms = std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - ended_at).count();
  EXPECT_EQ(c.reconnect_loops_seen(), 1u);
  c.create(node, "", CreateMode::ephemeral);  // the new session works

  ASSERT_TRUE(eventually([&] {
    std::lock_guard lk(observer->mu);
    return observer->loops == 1;
  }, 5s));
  {
    std::lock_guard lk(observer->mu);
    EXPECT_EQ(observer->looped_session, first_session);
    EXPECT_NE(observer->last_cause.find("SetWatches"), std::string::npos) << observer->last_cause;
    EXPECT_NE(observer->last_cause.find("jute.maxbuffer"), std::string::npos) << observer->last_cause;
  }
  spdlog::get(logger_name)->flush();
  const auto text = log_text.str();
  EXPECT_EQ(count_of(text, "is in a reconnect loop"), 1u) << text;
  std::printf("[ figures  ] negotiated timeout %lld ms: loop reported %lld ms after the first cut, after %llu "
              "connections cut on SetWatches; the old session's node gone %lld ms after the new session\n",
              static_cast<long long>(timeout.count()), static_cast<long long>(noticed_ms),
              static_cast<unsigned long long>(laps), static_cast<long long>(gone_ms));
  proxy.cut_on_opcode(-1);
  spdlog::drop(logger_name);
}

// A connection that carries answers breaks the streak: cut connections with
// answers in between are no loop, however many there are.
TEST(ReconnectLoop, ConnectionsThatCarryAnswersAreNoLoop) {
  auto& zk = shared_server();
  FaultProxy proxy(zk.port());
  ClientOptions o;
  o.connect = proxy.connect_string();
  o.session_timeout = 2000ms;
  Client c(o);
  const auto node = unique_path("loop-none");
  c.create(node, "", CreateMode::ephemeral);
  c.stat_async(node, [](const WatchEvent&) {}, [](Status, const Stat&) {});
  std::atomic<int> reconnects{0};
  c.add_listener([&](ConnectionState s) {
    if (s == ConnectionState::reconnected) reconnects.fetch_add(1);
  });
  const auto until = Clock::now() + c.negotiated_timeout() * 2;
  int cuts = 0;
  while (Clock::now() < until) {
    const int before = reconnects.load();
    proxy.cut();
    ++cuts;
    ASSERT_TRUE(eventually([&] { return reconnects.load() > before; }, 5s));
    // Answered on the new connection (a try sent just before it closed may fail).
    ASSERT_TRUE(eventually([&] {
      try {
        return c.try_stat(node).has_value();
      } catch (const Error&) {
        return false;
      }
    }, 5s));
  }
  EXPECT_GE(cuts, 3);
  EXPECT_EQ(c.reconnect_loops_seen(), 0u);
  EXPECT_EQ(c.session_epoch(), 1u);
}

}  // namespace
}  // namespace zklock::test
