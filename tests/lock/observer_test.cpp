// ClientOptions::observer (zklock/observer.hpp) against a real server: what
// it hears for grants, a contended wait, a timed-out try, releases and a
// retained re-take; and examples/metrics-exporter run as a child process,
// its /metrics scraped over loopback.
#include "zklock/observer.hpp"

#include <gtest/gtest.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "http_get.hpp"
#include "zk_harness.hpp"
#include "zklock/client.hpp"
#include "zklock/fair_mutex.hpp"

namespace zklock {
namespace {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;
using Duration = LockObserver::Duration;

// Every callback, in arrival order (they may come from several threads).
struct Recorder final : LockObserver {
  struct Event {
    std::string kind, path;
    Duration time{};
    bool retained = false;
    std::optional<Errc> code;  // failed only
  };
  mutable std::mutex mu;
  std::vector<Event> events;

  void add(Event e) {
    std::lock_guard lk(mu);
    events.push_back(std::move(e));
  }
  void acquire_started(std::string_view p) override { add({"started", std::string(p)}); }
  void granted(std::string_view p, Duration wait, bool retained) override {
    add({"granted", std::string(p), wait, retained});
  }
  void failed(std::string_view p, Duration wait, Errc code) override {
    add({"failed", std::string(p), wait, false, code});
  }
  void released(std::string_view p, Duration held) override { add({"released", std::string(p), held}); }
  void lost(std::string_view p, LossReason) override { add({"lost", std::string(p)}); }
  void validity_lapsed(std::int64_t) override { add({"lapsed", {}}); }

  std::vector<Event> of(const std::string& kind) const {
    std::lock_guard lk(mu);
    std::vector<Event> out;
    for (const auto& e : events) {
      if (e.kind == kind) out.push_back(e);
    }
    return out;
  }
};

ClientOptions observed(const std::shared_ptr<LockObserver>& o) {
  ClientOptions opts{.connect = test::shared_server().connect_string(), .session_timeout = 4s};
  opts.observer = o;
  return opts;
}

double ms(Duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

TEST(Observer, HearsGrantsWaitsTimeoutsAndReleases) {
  auto rec = std::make_shared<Recorder>();
  Client client(observed(rec));
  const std::string path = "/observer-test/contended";
  FairMutex mutex(client, path);

  const auto before_a = Clock::now();
  auto a = mutex.acquire(AcquireOptions{.owner = "a"});
  const auto granted_a = Clock::now();
  // b waits behind a; a holds for about 300 ms, then releases.
  std::optional<Lease> b;
  Clock::time_point b_granted;
  std::thread waiter([&] {
    b = mutex.acquire(AcquireOptions{.owner = "b"});
    b_granted = Clock::now();
  });
  ASSERT_TRUE(test::eventually([&] { return rec->of("started").size() == 2; }, 10s));
  std::this_thread::sleep_for(300ms);  // the hold being measured, not a wait for an event
  const auto releasing_a = Clock::now();
  a.release();
  const auto released_a = Clock::now();
  waiter.join();
  ASSERT_TRUE(b && *b);

  // While b holds: a try with a short timeout fails, and says so.
  EXPECT_FALSE(mutex.try_acquire_for(200ms, AcquireOptions{.owner = "c"}).has_value());
  const auto releasing_b = Clock::now();
  b->release();
  const auto released_b = Clock::now();

  // Granted and failed run before the caller gets the outcome, released
  // before release() returns: no waiting needed.
  const auto started = rec->of("started");
  const auto granted = rec->of("granted");
  const auto failed = rec->of("failed");
  const auto released = rec->of("released");
  ASSERT_EQ(started.size(), 3u);
  ASSERT_EQ(granted.size(), 2u);
  ASSERT_EQ(failed.size(), 1u);
  ASSERT_EQ(released.size(), 2u);
  EXPECT_TRUE(rec->of("lost").empty());
  {
    std::lock_guard lk(rec->mu);
    for (const auto& e : rec->events) EXPECT_TRUE(e.kind == "lapsed" || e.path == path) << e.kind << " " << e.path;
  }

  // a: uncontended, a round trip; b: waited for a's hold.
  EXPECT_FALSE(granted[0].retained);
  EXPECT_FALSE(granted[1].retained);
  EXPECT_LE(ms(granted[0].time), ms(granted_a - before_a));
  EXPECT_GT(granted[1].time, Duration::zero());
  EXPECT_GE(ms(granted[1].time), 250.0);
  EXPECT_LE(ms(granted[1].time), ms(b_granted - before_a));

  EXPECT_EQ(failed[0].code, Errc::timeout);
  EXPECT_GE(ms(failed[0].time), 190.0);
  EXPECT_LE(ms(failed[0].time), 5000.0);

  // Hold times: from the hand-out (before acquire() returned) to the
  // release call, so between what the caller measured inside and outside.
  EXPECT_GE(ms(released[0].time), ms(releasing_a - granted_a));
  EXPECT_LE(ms(released[0].time), ms(released_a - before_a));
  EXPECT_GE(ms(released[0].time), 300.0);
  EXPECT_GE(ms(released[1].time), ms(releasing_b - b_granted));
  EXPECT_LE(ms(released[1].time), ms(released_b - before_a));
}

TEST(Observer, ReportsARetainedRetake) {
  auto rec = std::make_shared<Recorder>();
  Client client(observed(rec));
  FairMutex mutex(client, "/observer-test/retained", MutexOptions{.retain = 5s});
  mutex.acquire().release();
  mutex.acquire().release();  // the idle node re-taken: no queueing
  const auto granted = rec->of("granted");
  ASSERT_EQ(granted.size(), 2u);
  EXPECT_FALSE(granted[0].retained);
  EXPECT_TRUE(granted[1].retained);
  EXPECT_EQ(rec->of("released").size(), 2u);
}

TEST(Observer, RefusedRequestIsAFailure) {
  auto rec = std::make_shared<Recorder>();
  Client client(observed(rec));
  FairMutex mutex(client, "/observer-test/reentrant");
  auto held = mutex.acquire();
  EXPECT_THROW(mutex.acquire(), Error);  // the same owner again: would_deadlock, before any request
  const auto failed = rec->of("failed");
  ASSERT_EQ(failed.size(), 1u);
  EXPECT_EQ(failed[0].code, Errc::would_deadlock);
  EXPECT_EQ(rec->of("started").size(), 2u);
}

// The body of a GET over loopback, or nullopt unless the answer is a 200.
std::optional<std::string> http_get(int port, const std::string& path) {
  auto r = test::http_get(port, path);
  if (!r) return std::nullopt;
  return std::move(r->body);
}

bool has_line(const std::string& text, const std::string& line) {
  return ("\n" + text).find("\n" + line + "\n") != std::string::npos;
}

TEST(MetricsExporter, ServesTheCyclesItRan) {
  auto child = test::ChildProcess::spawn(test::SpawnOptions{
      .argv = {METRICS_EXPORTER_BIN, "--connect", test::shared_server().connect_string(), "--lock-path",
               "/observer-test/exporter", "--port", "0", "--cycles", "5", "--hold-ms", "20", "--retain-ms", "5000",
               "--linger", "60"}});
  const auto listening = child.read_until("listening on ", 20s);
  ASSERT_TRUE(listening) << "no 'listening on' line";
  const int port = std::stoi(listening->substr(listening->rfind(':') + 1));
  // /metrics answers while the loop runs, and the figures reach the cycles.
  std::optional<std::string> body;
  ASSERT_TRUE(test::eventually([&] { return (body = http_get(port, "/metrics")).has_value(); }, 20s));
  EXPECT_NE(body->find("# TYPE zklock_client_acquire_wait_seconds histogram"), std::string::npos) << *body;
  ASSERT_TRUE(child.read_until("cycles done 5", 60s));
  body = http_get(port, "/metrics");
  ASSERT_TRUE(body);
  for (const char* line : {
           "zklock_client_acquisitions_started_total 5",
           "zklock_client_grants_total{kind=\"round_trip\"} 1",
           "zklock_client_grants_total{kind=\"retained\"} 4",
           "zklock_client_releases_total 5",
           "zklock_client_validity_lapses_total 0",
           "zklock_client_diverged_servers_total 0",
           "zklock_client_reconnect_loops_total 0",
           "zklock_client_acquire_wait_seconds_count 5",
           "zklock_client_acquire_wait_seconds_bucket{le=\"+Inf\"} 5",
           "zklock_client_hold_seconds_count 5",
           "zklock_client_exporter_cycles_total 5",
       }) {
    EXPECT_TRUE(has_line(*body, line)) << "missing '" << line << "' in\n" << *body;
  }
  EXPECT_EQ(body->find("zklock_client_failures_total{"), std::string::npos) << *body;
  EXPECT_EQ(body->find("zklock_client_losses_total{"), std::string::npos) << *body;
  // Each hold was at least --hold-ms: the sum of five is at least 0.1 s.
  const auto sum_at = body->find("\nzklock_client_hold_seconds_sum ");
  ASSERT_NE(sum_at, std::string::npos);
  EXPECT_GE(std::stod(body->substr(sum_at + 32)), 0.1);
  child.terminate();
}

TEST(MetricsExporter, HelpExitsZero) {
  auto child = test::ChildProcess::spawn(test::SpawnOptions{.argv = {METRICS_EXPORTER_BIN, "--help"}});
  EXPECT_TRUE(child.read_until("--lock-path", 10s));
  const auto st = child.wait_exit(10s);
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->exited() && st->exit_code() == 0) << st->describe();
}

}  // namespace
}  // namespace zklock
