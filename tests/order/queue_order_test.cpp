// Queue order and the long queue, against real ZooKeeper servers: many
// real processes granted in queue order, and a queue of 1,000 waiters
// drained one release at a time at the cost per acquisition of 100 waiters,
// each release waking exactly one waiter (no herd). Every test asserts its
// outcome and prints the figure it measured.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <future>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "proc_status.hpp"
#include "zk_harness.hpp"
#include "zklock/client.hpp"
#include "zklock/fair_mutex.hpp"
#include "zklock/protocol/node_name.hpp"

namespace zklock {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using test::eventually;
using test::rss_kb;
using test::unique_lock_path;
using test::ZkServer;

std::int64_t counter(const test::Mntr& m, const char* key) {
  auto v = m.counter(key);
  if (!v) throw std::runtime_error(std::string("mntr has no ") + key);
  return *v;
}

// ---------------------------------------------------------------------------
// Many processes, one lock: 20 processes x 50 acquisitions.

TEST(QueueOrder, TwentyProcessesFiftyAcquisitionsEachInQueueOrder) {
  constexpr int kProcs = 20, kEach = 50;
  const auto path = unique_lock_path("procs");
  test::TempDir dir;
  const auto check = dir / "inside";
  const auto log = dir / "grants.log";
  const auto go = dir / "go";
  std::vector<test::ChildProcess> workers;
  for (int i = 0; i < kProcs; ++i) {
    test::SpawnOptions o;
    o.argv = {ZKLOCK_TEST_WORKER, "rounds", "--zk", test::shared_server().connect_string(), "--lock", path,
              "--count", std::to_string(kEach), "--owner", "proc-" + std::to_string(i), "--hold-ms", "1",
              "--check-file", check.string(), "--log-file", log.string(), "--go-file", go.string()};
    workers.push_back(test::ChildProcess::spawn(o));
  }
  for (auto& w : workers) ASSERT_TRUE(w.read_until("ready", 30s)) << "worker did not connect";
  const auto start = Clock::now();
  std::ofstream(go).put('\n');
  for (auto& w : workers) {
    auto st = w.wait_exit(150s);
    ASSERT_TRUE(st) << "worker still running after 150 s";
    std::string lines, line;
    while (auto l = w.read_line(100ms)) lines += *l + "\n";
    EXPECT_TRUE(st->exited() && st->exit_code() == 0) << st->describe() << "\n" << lines;
    EXPECT_EQ(lines.find("violation"), std::string::npos) << lines;
  }
  const double secs = std::chrono::duration<double>(Clock::now() - start).count();

  // The append log is the global grant order: czxids strictly increase in it.
  std::ifstream in(log);
  std::string owner;
  int i = 0;
  std::int64_t czxid = 0, last = 0;
  int grants = 0, out_of_order = 0;
  while (in >> owner >> i >> czxid) {
    if (czxid <= last) ++out_of_order;
    last = czxid;
    ++grants;
  }
  EXPECT_EQ(grants, kProcs * kEach);
  EXPECT_EQ(out_of_order, 0);
  Client c({.connect = test::shared_server().connect_string(), .session_timeout = 4s});
  EXPECT_TRUE(c.children(path).empty());
  std::printf("[figure] %d processes x %d acquisitions: %d grants in %.2f s (%.0f/s), %d out of queue order, "
              "0 exclusion violations\n",
              kProcs, kEach, grants, secs, grants / secs, out_of_order);
}

// ---------------------------------------------------------------------------
// The long queue: 1,000 waiters over 20 sessions, queued behind a holder, then
// drained: the per-acquisition cost compared with 100 waiters, and the wake-ups
// per release ("does every waiter wake at once?": one successor, never a herd).

struct DrainFigures {
  int waiters = 0;
  double response_bytes = 0, watch_bytes = 0, packets_received = 0, packets_sent = 0;  // per acquisition
  std::int64_t watch_bytes_total = 0;
  std::int64_t expected_notifications = 0;  // successor wake-ups + releasers' own-node watches
  std::size_t node_path_length = 0;
  double seconds = 0;
  int out_of_order = 0, overlaps = 0, failed = 0;
  std::size_t granted = 0;
  int granted_while_held = 0;  // grants before the holder's release
  int early = 0;               // grants before the previous holder began releasing
  // Watchers fired on node deletions, children and data changes (mntr).
  std::int64_t deleted_watchers = 0, children_watchers = 0, changed_watchers = 0;
  std::int64_t releases = 0;       // the holder's and every waiter's
  std::int64_t cross_session = 0;  // releases whose successor is on another session
  std::int64_t watches_at_peak = 0;
  long max_rss_queued_kb = 0, max_rss_running_kb = 0;
};

DrainFigures drain(ZkServer& srv, int waiters, int sessions) {
  DrainFigures f;
  f.waiters = waiters;
  const auto path = unique_lock_path("drain");
  const ClientOptions opts{.connect = srv.connect_string(), .session_timeout = 4s};
  Client holder_client(opts);
  FairMutex holder_mutex(holder_client, path);
  Lease holder = holder_mutex.acquire({.owner = "holder"});
  const auto holder_granted = Clock::now();

  std::vector<std::unique_ptr<Client>> clients;
  std::vector<std::unique_ptr<FairMutex>> mutexes;
  for (int s = 0; s < sessions; ++s) {
    clients.push_back(std::make_unique<Client>(opts));
    mutexes.push_back(std::make_unique<FairMutex>(*clients.back(), path));
  }
  struct Grant {
    std::int64_t czxid;
    std::int64_t session;
    Clock::time_point at, releasing;  // granted; release begun
  };
  std::mutex mu;
  std::condition_variable cv;
  std::vector<Grant> grants;
  int released = 0;  // GUARDED_BY(mu): releases the server has answered
  std::atomic<int> inside{0}, overlaps{0}, failed{0};
  for (int i = 0; i < waiters; ++i) {
    const auto s = static_cast<std::size_t>(i % sessions);
    const auto session = clients[s]->session_id();
    mutexes[s]->acquire_async(
        [&, session](AcquireResult r) {
          if (r.error) {
            ++failed;
          } else {
            const auto at = Clock::now();
            if (inside.fetch_add(1) != 0) ++overlaps;
            {
              std::lock_guard lk(mu);
              grants.push_back({r.lease.token().czxid(), session, at, Clock::now()});
            }
            inside.fetch_sub(1);
            // The counters are read once every release is answered: the
            // last release's notification must be in them.
            r.lease.release_async([&] {
              std::lock_guard lk(mu);
              ++released;
              cv.notify_all();
            });
            return;
          }
          std::lock_guard lk(mu);
          cv.notify_all();
        },
        {.owner = "w-" + std::to_string(i)});
  }
  // Queued: every waiter's node exists, and every watch the queue needs is
  // set (each waiter watches its own node and its predecessor; one session's
  // watches on one node are one server-side watch).
  EXPECT_TRUE(eventually([&] { return holder_client.children(path).size() == static_cast<std::size_t>(waiters + 1); },
                         60s));
  auto kids = holder_client.children(path);
  std::sort(kids.begin(), kids.end(), [](const std::string& a, const std::string& b) {
    return protocol::compare_sequence(protocol::parse_lock_node_name(a)->sequence, protocol::parse_lock_node_name(b)->sequence) < 0;
  });
  std::set<std::pair<std::string, std::int64_t>> watch_pairs;
  for (std::size_t k = 0; k < kids.size(); ++k) {
    const auto owner = holder_client.stat(path + "/" + kids[k]).ephemeral_owner;
    watch_pairs.insert({kids[k], owner});
    if (k > 0) watch_pairs.insert({kids[k - 1], owner});
  }
  f.node_path_length = path.size() + 1 + kids.front().size();
  const auto want_watches = static_cast<std::int64_t>(watch_pairs.size());
  EXPECT_TRUE(eventually([&] { return counter(srv.mntr(), "zk_watch_count") == want_watches; }, 30s))
      << "watch count " << counter(srv.mntr(), "zk_watch_count") << ", want " << want_watches;
  {
    std::lock_guard lk(mu);
    f.granted_while_held = static_cast<int>(grants.size());
  }
  f.max_rss_queued_kb = rss_kb();

  const auto m0 = srv.mntr();
  f.watches_at_peak = counter(m0, "zk_watch_count");
  const auto start = Clock::now();
  const auto holder_czxid = holder.token().czxid();
  const auto holder_session = holder_client.session_id();
  holder.release();
  {
    // Woken by every release; the process's RSS sampled meanwhile.
    const auto deadline = Clock::now() + 120s;
    bool done = false;
    while (!done && Clock::now() < deadline) {
      {
        std::unique_lock lk(mu);
        done = cv.wait_for(lk, 50ms, [&] { return released + failed.load() == waiters; });
      }
      f.max_rss_running_kb = std::max(f.max_rss_running_kb, rss_kb());
    }
    std::lock_guard lk(mu);
    EXPECT_TRUE(done) << grants.size() << " granted, " << released << " released, " << failed << " failed";
  }
  f.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  // The server adds a notification's bytes after sending it (see
  // notification_bytes), so the last release's may not be counted yet when
  // its answer is in: read the counters once zk_watch_bytes stops moving.
  auto m1 = srv.mntr();
  EXPECT_TRUE(eventually([&] {
    auto m = srv.mntr();
    const bool settled = counter(m, "zk_watch_bytes") == counter(m1, "zk_watch_bytes");
    m1 = std::move(m);
    return settled;
  }, 10s));
  const double n = waiters;
  f.response_bytes = (counter(m1, "zk_response_bytes") - counter(m0, "zk_response_bytes")) / n;
  f.watch_bytes_total = counter(m1, "zk_watch_bytes") - counter(m0, "zk_watch_bytes");
  f.watch_bytes = f.watch_bytes_total / n;
  f.packets_received = (counter(m1, "zk_packets_received") - counter(m0, "zk_packets_received")) / n;
  f.packets_sent = (counter(m1, "zk_packets_sent") - counter(m0, "zk_packets_sent")) / n;
  f.deleted_watchers = counter(m1, "zk_sum_node_deleted_watch_count") - counter(m0, "zk_sum_node_deleted_watch_count");
  f.children_watchers = counter(m1, "zk_sum_node_children_watch_count") - counter(m0, "zk_sum_node_children_watch_count");
  f.changed_watchers = counter(m1, "zk_sum_node_changed_watch_count") - counter(m0, "zk_sum_node_changed_watch_count");
  f.overlaps = overlaps;
  f.failed = failed;

  // Each release notifies its releaser (own-node watch) and its successor
  // (blocker watch); one notification when both are the same session.
  std::lock_guard lk(mu);
  f.granted = grants.size();
  std::int64_t last = holder_czxid, prev_session = holder_session;
  for (const auto& g : grants) {
    if (g.czxid <= last) ++f.out_of_order;
    last = g.czxid;
    f.expected_notifications += g.session == prev_session ? 1 : 2;
    prev_session = g.session;
  }
  f.expected_notifications += 1;  // the last release
  // In token (creation) order, with the holder first: each grant came after
  // its predecessor's grant and after its release began (exactly one grant
  // per release); count the hand-offs to another session.
  auto holds = grants;
  holds.insert(holds.begin(), Grant{holder_czxid, holder_session, holder_granted, start});
  std::sort(holds.begin(), holds.end(), [](const Grant& a, const Grant& b) { return a.czxid < b.czxid; });
  for (std::size_t i = 1; i < holds.size(); ++i) {
    if (holds[i].at < holds[i - 1].releasing || holds[i].at < holds[i - 1].at) ++f.early;
    f.cross_session += holds[i].session != holds[i - 1].session;
  }
  f.releases = static_cast<std::int64_t>(holds.size());
  EXPECT_TRUE(eventually([&] { return holder_client.children(path).empty(); }));
  return f;
}

// Bytes of one watch notification for a node path of `length` characters,
// measured on `srv` (nothing else may be watched meanwhile).
std::int64_t notification_bytes(ZkServer& srv, std::size_t length) {
  Client c({.connect = srv.connect_string(), .session_timeout = 4s});
  std::string probe = "/probe-";
  probe.resize(length, 'x');
  std::promise<void> created, fired;
  c.create_async(probe, "", CreateMode::ephemeral, [&](Status st, const std::string&, const Stat&) {
    EXPECT_TRUE(st.ok());
    created.set_value();
  });
  created.get_future().wait();
  std::promise<void> set;
  c.stat_async(probe, [&](const WatchEvent&) { fired.set_value(); }, [&](Status, const Stat&) { set.set_value(); });
  set.get_future().wait();
  const auto before = counter(srv.mntr(), "zk_watch_bytes");
  c.remove_async(probe, -1, [](Status) {});
  EXPECT_EQ(fired.get_future().wait_for(5s), std::future_status::ready);
  // The server counts a notification's bytes after sending it: the client
  // can see the event before mntr does. Wait (bounded) for the count.
  std::int64_t bytes = 0;
  eventually([&] { return (bytes = counter(srv.mntr(), "zk_watch_bytes") - before) > 0; }, 5s);
  return bytes;
}

// The long queue drained twice on one server of our own (its mntr counters
// see only this test): per acquisition, 1,000 waiters cost what 100 do (reply
// bytes, packets within 10 %), and each release wakes its releaser and the
// one waiter behind it, never a herd: the watch notifications' bytes and the
// server's count of watchers fired on deletions both say so, and no children
// or data watch fires. Grants follow queue (token) order, each after its
// predecessor began releasing; the client's memory stays bounded, and the
// server is healthy with nothing outstanding once the sessions close.
TEST(Drain, ThousandWaitersDrainAtConstantCostOneWakingPerRelease) {
  ZkServer srv({.tick = 200ms});
  srv.start();
  constexpr int kSessions = 20;
  const auto small = drain(srv, 100, kSessions);
  const auto large = drain(srv, 1000, kSessions);
  const auto per_notification = notification_bytes(srv, large.node_path_length);
  ASSERT_GT(per_notification, 0);
  constexpr long kRssBoundKb = 128 * 1024;
  for (const auto* f : {&small, &large}) {
    std::printf("[figure] drain of %4d waiters over %d sessions: %.2f s (%.2f ms per hand-off), per acquisition: "
                "%.1f reply bytes, %.1f watch bytes, %.2f packets received, %.2f packets sent; notifications %lld "
                "(expected %lld: one successor + the releaser's own watch per release)\n",
                f->waiters, kSessions, f->seconds, 1000 * f->seconds / static_cast<double>(f->releases),
                f->response_bytes, f->watch_bytes, f->packets_received, f->packets_sent,
                static_cast<long long>(f->watch_bytes_total / per_notification),
                static_cast<long long>(f->expected_notifications));
    std::printf("[figure] drain of %4d waiters: watchers fired per release %.3f = the releaser's own + one other "
                "session for %lld of %lld releases; children/data watches fired %lld/%lld; watches at peak %lld; "
                "client RSS %ld kB queued, %ld kB max while draining\n",
                f->waiters, static_cast<double>(f->deleted_watchers) / static_cast<double>(f->releases),
                static_cast<long long>(f->cross_session), static_cast<long long>(f->releases),
                static_cast<long long>(f->children_watchers), static_cast<long long>(f->changed_watchers),
                static_cast<long long>(f->watches_at_peak), f->max_rss_queued_kb, f->max_rss_running_kb);
    EXPECT_EQ(f->failed, 0);
    EXPECT_EQ(f->overlaps, 0);
    EXPECT_EQ(f->out_of_order, 0);
    EXPECT_EQ(f->granted_while_held, 0) << "granted while the holder held";
    EXPECT_EQ(f->granted, static_cast<std::size_t>(f->waiters));
    EXPECT_EQ(f->early, 0) << "grants that did not follow exactly one release";
    EXPECT_EQ(f->watch_bytes_total % per_notification, 0);
    EXPECT_EQ(f->watch_bytes_total / per_notification, f->expected_notifications) << "a release woke more than one waiter";
    EXPECT_EQ(f->deleted_watchers - f->releases, f->cross_session)
        << "watchers fired on node deletions beyond the owner and its one successor";
    EXPECT_EQ(f->children_watchers, 0);
    EXPECT_EQ(f->changed_watchers, 0);
    EXPECT_LT(f->max_rss_queued_kb, kRssBoundKb);
    EXPECT_LT(f->max_rss_running_kb, kRssBoundKb);
  }
  auto within = [](double at1000, double at100) { return std::abs(at1000 - at100) <= 0.10 * at100; };
  EXPECT_TRUE(within(large.response_bytes, small.response_bytes))
      << large.response_bytes << " vs " << small.response_bytes;
  EXPECT_TRUE(within(large.packets_received, small.packets_received))
      << large.packets_received << " vs " << small.packets_received;
  EXPECT_TRUE(within(large.packets_sent, small.packets_sent)) << large.packets_sent << " vs " << small.packets_sent;
  std::printf("[figure] 1000 vs 100 waiters: reply bytes/acq %.1f vs %.1f (%+.1f %%), packets/acq %.2f vs %.2f "
              "(%+.1f %%)\n",
              large.response_bytes, small.response_bytes, 100 * (large.response_bytes / small.response_bytes - 1),
              large.packets_received + large.packets_sent, small.packets_received + small.packets_sent,
              100 * ((large.packets_received + large.packets_sent) / (small.packets_received + small.packets_sent) - 1));
  // Healthy: every session of both drains closed, the server answers and has
  // nothing pending.
  EXPECT_EQ(test::four_letter_word("127.0.0.1", srv.port(), "ruok").value_or(""), "imok");
  EXPECT_TRUE(eventually([&] { return srv.mntr().counter("zk_outstanding_requests").value_or(-1) == 0; }, 10s))
      << "requests still outstanding after every session closed";
}

}  // namespace
}  // namespace zklock
