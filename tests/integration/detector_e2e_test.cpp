// zklock-detector end to end: real FairMutex / FairSharedMutex owners, the
// detector in-process (Daemon) or as the zklock-detector binary in a child
// process, against real ZooKeeper servers.
//
// Every scenario that closes a cycle prints its detection latency twice:
// the detector's own figure (youngest cycle node's creation -> detection) and
// the victim's (cycle closed -> its acquire failed); both must stay within
// min-wait + interval + 1 s.
//
// The heavy-contention run lasts ZKLOCK_DETECTOR_SOAK_SECONDS (default 20;
// set 60 for the full acceptance run, at most 60). 20 s in CI: the run
// saturates the two cores it shares with the other integration binaries,
// whose own timing bounds suffer, and 20 s already makes thousands of
// hand-offs with waits past min-wait.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <deque>
#include <filesystem>
#include <fstream>
#include <future>
#include <map>
#include <mutex>
#include <random>
#include <regex>
#include <set>
#include <sstream>
#include <stop_token>
#include <thread>

#include "detector/daemon.hpp"
#include "fault_proxy.hpp"
#include "running_daemon.hpp"
#include "zk_harness.hpp"
#include "zklock/fair_mutex.hpp"
#include "zklock/protocol/node_name.hpp"
#include "zklock/protocol/revoke.hpp"
#include "zklock/shared_mutex.hpp"

namespace zklock::detector {
namespace {

using namespace zklock::model;

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using std::chrono::milliseconds;

double secs(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

using test::eventually;

// Throws (the test fails with the message) unless `ok`.
void require(bool ok, const std::string& what) {
  if (!ok) throw std::runtime_error(what);
}

ClientOptions session(const std::string& connect, std::optional<DigestCredentials> creds = std::nullopt) {
  ClientOptions o;
  o.connect = connect;
  o.session_timeout = 4s;
  o.credentials = std::move(creds);
  return o;
}

// ---------------------------------------------------------------------------
// Owners acting through the real lock

// One asynchronous acquisition, waited on with a deadline.
class Request {
 public:
  Request() : s_(std::make_shared<State>()) {}
  AcquireCallback callback() const {
    return [s = s_](AcquireResult r) {
      std::lock_guard lk(s->mu);
      s->result = std::move(r);
      s->at = Clock::now();
      s->cv.notify_all();
    };
  }
  bool wait(milliseconds timeout) const {
    std::unique_lock lk(s_->mu);
    return s_->cv.wait_for(lk, timeout, [&] { return s_->result.has_value(); });
  }
  bool done() const {
    std::lock_guard lk(s_->mu);
    return s_->result.has_value();
  }
  bool granted() const {
    std::lock_guard lk(s_->mu);
    return s_->result && !s_->result->error;
  }
  std::optional<Errc> error() const {
    std::lock_guard lk(s_->mu);
    if (!s_->result || !s_->result->error) return std::nullopt;
    return s_->result->error->code();
  }
  std::string message() const {
    std::lock_guard lk(s_->mu);
    if (!s_->result) return "(pending)";
    return s_->result->error ? s_->result->error->what() : "(granted)";
  }
  Clock::time_point at() const {
    std::lock_guard lk(s_->mu);
    return s_->at;
  }
  Lease take_lease() {
    std::lock_guard lk(s_->mu);
    return s_->result ? std::move(s_->result->lease) : Lease{};
  }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    std::optional<AcquireResult> result;
    Clock::time_point at;
  };
  std::shared_ptr<State> s_;
};

// An owner id taking real locks on one Client, asynchronously, so one test
// thread can stage a deadlock step by step. Requests are cancelled and
// leases released (on the test thread) when the Actor dies.
class Actor {
 public:
  Actor(Client& client, std::string owner, int priority = 0, bool read_write = false)
      : client_(client), owner_(std::move(owner)), priority_(priority), read_write_(read_write) {}
  ~Actor() {
    stop_.request_stop();
    for (auto& r : requests_) {
      r.wait(10s);
      // Leases granted but never kept are released here, on the test thread,
      // not wherever the last copy of the request happens to die.
      if (auto l = r.take_lease()) leases_.push_back(std::move(l));
    }
    release_all();
  }
  Actor(const Actor&) = delete;
  Actor& operator=(const Actor&) = delete;

  const std::string& owner() const { return owner_; }
  Client& client() { return client_; }

  // Starts an acquisition; returns at once.
  Request start(const std::string& lock, Mode mode = Mode::exclusive) {
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
  // Acquires and keeps the lease. Throws unless granted within 20 s.
  void hold(const std::string& lock, Mode mode = Mode::exclusive) {
    auto r = start(lock, mode);
    require(r.wait(20s), owner_ + " was not granted " + lock + " within 20 s");
    require(r.granted(), owner_ + " could not take " + lock + ": " + r.message());
    leases_.push_back(r.take_lease());
  }
  // Starts an acquisition that must wait; returns once its node is queued
  // (visible on ZooKeeper), so the order of waits is the order of calls.
  Request enqueue(const std::string& lock, Mode mode = Mode::exclusive) {
    const auto before = own_nodes(lock);
    auto r = start(lock, mode);
    require(eventually([&] { return own_nodes(lock) > before || r.done(); }, 20s),
            owner_ + "'s node on " + lock + " did not appear");
    require(!r.done() || !r.granted(), owner_ + " was granted " + lock + " at once: no wait to deadlock on");
    return r;
  }
  // Moves a granted request's lease into the held set.
  void keep(Request& r) { leases_.push_back(r.take_lease()); }
  std::vector<Lease>& leases() { return leases_; }
  // Backs off: releases every lease held.
  void release_all() {
    for (auto& l : leases_) l.release();
    leases_.clear();
  }

 private:
  std::size_t own_nodes(const std::string& lock) {
    const auto key = owner_key(owner_);
    std::size_t n = 0;
    try {
      for (const auto& c : client_.children(lock)) {
        if (auto p = parse_lock_node_name(c); p && p->owner_key == key) ++n;
      }
    } catch (const Error& e) {
      if (e.code() != Errc::no_node) throw;
    }
    return n;
  }

  Client& client_;
  std::string owner_;
  int priority_;
  bool read_write_;
  std::stop_source stop_;
  std::deque<std::unique_ptr<FairMutex>> mutexes_;
  std::deque<std::unique_ptr<FairSharedMutex>> shared_;
  std::vector<Request> requests_;
  std::vector<Lease> leases_;
};

// The classic deadlock with real locks: A holds x, B holds y; A asks for y,
// then B asks for x. B's wait is the youngest node of the cycle.
struct CrossOrder {
  Request a_waits, b_waits;
  Clock::time_point closed;  // B's node queued: the cycle exists from here on
};
CrossOrder cross_order(Actor& a, Actor& b, const std::string& x, const std::string& y) {
  CrossOrder c;
  a.hold(x);
  b.hold(y);
  c.a_waits = a.enqueue(y);
  c.closed = Clock::now();
  c.b_waits = b.enqueue(x);
  return c;
}

milliseconds latency_bound(milliseconds min_wait, milliseconds interval) { return min_wait + interval + 1s; }

// The victim's view: its acquire failed with deadlock_victim, carrying the
// cycle, within the bound after the cycle closed. Prints the latency.
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

// Runs a Daemon on its own thread and collects its cycle reports.
// Runs a Daemon on its own thread and collects its cycle reports.
using Running = test::RunningDaemon;

void print_report(const CycleReport& r, const DetectorConfig& cfg, const std::string& label) {
  const auto bound = latency_bound(cfg.min_wait, cfg.interval);
  std::printf("[ latency  ] %s: detector broke %s (victim %s), detection latency %.3f s (bound %.3f s)\n",
              label.c_str(), r.text.c_str(), r.victim.owner.c_str(), r.latency_seconds, secs(bound));
  EXPECT_LE(r.latency_seconds, secs(bound)) << label;
}

// Waits for the first revocation report and checks it names `victim`.
void expect_revoked(Running& run, const std::string& victim, const std::string& label) {
  const auto revoked = run.wait_for("revoked", 1, 15s);
  ASSERT_EQ(revoked.size(), 1u) << label << ": no revocation";
  EXPECT_EQ(revoked[0].victim.owner, victim) << label;
  print_report(revoked[0], run.cfg(), label);
}

// ---------------------------------------------------------------------------
// The detector binary

// A scratch directory removed at the end of the test.
struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "zklock-det-e2e-XXXXXX").string();
    require(::mkdtemp(tmpl.data()) != nullptr, "mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

std::string read_file(const fs::path& p) {
  std::ifstream in(p);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// zklock-detector in a child process; its log (stderr) goes to a file that
// the test reads line by line.
class DetectorProcess {
 public:
  DetectorProcess(const fs::path& dir, const std::string& name, std::vector<std::string> args) : log_(dir / (name + ".log")) {
    test::SpawnOptions so;
    so.argv = {ZKLOCK_DETECTOR_BINARY, "--metrics-port", "0", "--log-level", "debug"};
    so.argv.insert(so.argv.end(), args.begin(), args.end());
    so.output_file = log_;
    so.capture_stdout = false;
    child_ = test::ChildProcess::spawn(so);
  }
  test::ChildProcess& child() { return child_; }
  std::string log() const { return read_file(log_); }
  // The first log line containing every needle, waiting up to `timeout`.
  std::optional<std::string> wait_line(const std::vector<std::string>& needles, milliseconds timeout) const {
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

 private:
  fs::path log_;
  test::ChildProcess child_;
};

// "... | detection latency 0.612 s" -> 0.612
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

// The candidate node (under /zklock/detector) whose data is `id`, if any.
std::optional<std::string> candidate_of(Client& c, const std::string& id) {
  for (const auto& name : c.children(std::string(kElectionPath))) {
    const auto path = std::string(kElectionPath) + "/" + name;
    if (c.try_get(path) == id) return path;
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------

// ===========================================================================
// 1. Real locks, opposite orders

TEST(DetectorE2E, TwoOwnersTakingRealLocksInOppositeOrdersTheBinaryRevokesTheYoungest) {
  const auto zk = test::shared_server().connect_string();
  const auto root = test::unique_path("e2e-pair");
  TempDir dir;
  const auto id = "e2e-pair-detector-" + std::to_string(::getpid());
  DetectorProcess det(dir.path, "detector", detector_args(zk, root, id));
  ASSERT_TRUE(det.wait_line({"now the leader"}, 20s)) << det.log();

  Client ca(session(zk)), cb(session(zk));
  Actor a(ca, "alice"), b(cb, "bob");
  const auto x = root + "/x", y = root + "/y";
  auto c = cross_order(a, b, x, y);

  const auto bound = latency_bound(500ms, 200ms);
  expect_victim(c.b_waits, c.closed, "alice -[" + y + "]-> bob -[" + x + "]-> alice", bound, "pair (binary)");
  EXPECT_NE(c.b_waits.message().find("deadlock detector " + id), std::string::npos) << c.b_waits.message();
  EXPECT_FALSE(c.a_waits.done()) << "alice must still wait for y while bob holds it: " << c.a_waits.message();
  b.release_all();  // the victim backs off
  expect_granted(c.a_waits, "alice, after bob backed off");
  a.keep(c.a_waits);

  const auto line = det.wait_line({"outcome revoked", root}, 5s);
  ASSERT_TRUE(line) << det.log();
  EXPECT_NE(line->find("victim bob"), std::string::npos) << *line;
  print_logged_latency(*line, bound, "pair (binary)");
  EXPECT_EQ(det.child().terminate(5s).describe(), "exit 0");
}

TEST(DetectorE2E, EachPolicyRevokesTheExpectedRealOwner) {
  const auto zk = test::shared_server().connect_string();
  struct Case {
    Policy policy;
    bool alice_is_victim;
  };
  // alice: priority -2, holds one extra lock, the older wait. bob: priority 4, the younger wait.
  for (const auto& k : {Case{Policy::youngest, false}, Case{Policy::oldest, true}, Case{Policy::fewest_held, false},
                        Case{Policy::most_held, true}, Case{Policy::lowest_priority, true}}) {
    const std::string name(policy_name(k.policy));
    SCOPED_TRACE(name);
    const auto root = test::unique_path("e2e-policy");
    auto cfg = config(zk, root, "e2e-policy");
    cfg.policy.policy = k.policy;
    Running run(cfg);
    ASSERT_TRUE(run.daemon().election().wait_leader(10s));
    Client ca(session(zk)), cb(session(zk));
    Actor a(ca, "alice", -2), b(cb, "bob", 4);
    a.hold(root + "/extra");
    auto c = cross_order(a, b, root + "/x", root + "/y");
    const auto cycle = "alice -[" + root + "/y]-> bob -[" + root + "/x]-> alice";
    const auto bound = latency_bound(cfg.min_wait, cfg.interval);
    auto& victim_wait = k.alice_is_victim ? c.a_waits : c.b_waits;
    auto& other_wait = k.alice_is_victim ? c.b_waits : c.a_waits;
    expect_victim(victim_wait, c.closed, cycle, bound, "policy " + name);
    expect_revoked(run, k.alice_is_victim ? "alice" : "bob", "policy " + name);
    (k.alice_is_victim ? a : b).release_all();
    expect_granted(other_wait, "policy " + name + ": the survivor");
  }
}

// A 3-cycle, a disjoint 2-cycle and a self-loop (one owner id on two
// sessions: the re-entry check is per Client, as it would be across two
// processes), all of real locks, broken in one scan.
TEST(DetectorE2E, ThreeCycleTwoCycleAndSelfLoopOfRealLocksBrokenInOneScan) {
  const auto zk = test::shared_server().connect_string();
  const auto root = test::unique_path("e2e-many");
  auto l = [&](const char* name) { return root + "/" + name; };
  auto cfg = config(zk, root, "e2e-many");
  Daemon d(cfg);  // scanned by hand: one scan must see all three
  ASSERT_TRUE(d.election().wait_leader(10s));
  std::deque<Client> clients;
  auto actor = [&](std::deque<Actor>& out, const std::string& owner) -> Actor& {
    return out.emplace_back(clients.emplace_back(session(zk)), owner);
  };
  std::deque<Actor> actors;
  Actor &a = actor(actors, "A"), &b = actor(actors, "B"), &c = actor(actors, "C");
  Actor &p = actor(actors, "P"), &q = actor(actors, "Q");
  Actor &s1 = actor(actors, "S"), &s2 = actor(actors, "S");
  a.hold(l("a"));
  b.hold(l("b"));
  c.hold(l("c"));
  auto a_waits = a.enqueue(l("b"));
  auto b_waits = b.enqueue(l("c"));
  auto c_waits = c.enqueue(l("a"));
  p.hold(l("p"));
  q.hold(l("q"));
  auto p_waits = p.enqueue(l("q"));
  auto q_waits = q.enqueue(l("p"));
  s1.hold(l("s"));
  auto s_waits = s2.enqueue(l("s"));
  const auto closed = Clock::now();

  ASSERT_TRUE(eventually([&] { return d.mirror().stats().nodes == 12 && d.mirror().idle(); }, 10s));
  std::this_thread::sleep_until(closed + cfg.min_wait + 50ms);  // every wait old enough to count
  const auto reports = d.scan_once();
  ASSERT_EQ(reports.size(), 3u);
  std::set<std::string> victims;
  for (const auto& r : reports) {
    EXPECT_EQ(r.outcome, "revoked") << r.text << ": " << r.detail;
    victims.insert(r.victim.owner);
    print_report(r, cfg, "one scan");
  }
  EXPECT_EQ(victims, (std::set<std::string>{"C", "Q", "S"}));

  const auto bound = latency_bound(cfg.min_wait, cfg.interval);
  expect_victim(c_waits, closed, "A -[" + l("b") + "]-> B -[" + l("c") + "]-> C -[" + l("a") + "]-> A", bound,
                "3-cycle");
  expect_victim(q_waits, closed, "P -[" + l("q") + "]-> Q -[" + l("p") + "]-> P", bound, "2-cycle");
  expect_victim(s_waits, closed, "S -[" + l("s") + "]-> S", bound, "self-loop");
  // The others proceed once the victims back off.
  c.release_all();
  expect_granted(b_waits, "B");
  b.keep(b_waits);
  b.release_all();
  expect_granted(a_waits, "A");
  q.release_all();
  expect_granted(p_waits, "P");
  EXPECT_TRUE(d.scan_once().empty());
}

// The race, with real locks: between the snapshot and the multi, alice
// gives up x on her own (the cycle dissolves and bob is granted x). The
// multi's checks fail: nothing is revoked, the attempt is counted aborted.
TEST(DetectorE2E, ACycleOfRealLocksThatDissolvesBeforeTheMultiIsNotRevoked) {
  const auto zk = test::shared_server().connect_string();
  const auto root = test::unique_path("e2e-race");
  auto cfg = config(zk, root, "e2e-race");
  Daemon d(cfg);
  ASSERT_TRUE(d.election().wait_leader(10s));
  Client ca(session(zk)), cb(session(zk));
  Actor a(ca, "alice"), b(cb, "bob");
  auto c = cross_order(a, b, root + "/x", root + "/y");
  ASSERT_TRUE(eventually([&] { return d.mirror().stats().nodes == 4 && d.mirror().idle(); }, 10s));
  std::this_thread::sleep_until(c.closed + cfg.min_wait + 50ms);
  std::string released;
  d.before_revoke = [&](const Cycle&) {
    released = a.leases()[0].node_path();
    a.leases()[0].release();  // alice's hold on x ends: bob's wait is granted
  };
  const auto reports = d.scan_once();
  ASSERT_EQ(reports.size(), 1u);
  EXPECT_EQ(reports[0].outcome, "aborted") << reports[0].detail;
  EXPECT_EQ(d.metrics().aborted(), 1u);
  EXPECT_EQ(d.metrics().revocations("revoked"), 0u);
  expect_granted(c.b_waits, "bob, once alice let go of x");
  b.keep(c.b_waits);
  EXPECT_FALSE(read_revocation_record(ca, b.leases().back().node_path()));  // bob's (ex-)waiting node
  EXPECT_FALSE(read_revocation_record(ca, released));
  b.release_all();
  expect_granted(c.a_waits, "alice");
  std::printf("[ race     ] dissolved cycle: outcome %s, aborted attempts counted %llu\n", reports[0].outcome.c_str(),
              static_cast<unsigned long long>(d.metrics().aborted()));
}

// Whether `session` holds a data watch on `path`, from the server's `wchp`
// (each watched path, then its sessions on tab-indented lines).
bool watched_by(int port, const std::string& path, std::int64_t session) {
  auto text = test::four_letter_word("127.0.0.1", port, "wchp");
  if (!text) return false;
  char id[32];
  std::snprintf(id, sizeof id, "0x%llx", static_cast<unsigned long long>(session));
  std::istringstream in(*text);
  bool under = false;
  for (std::string line; std::getline(in, line);) {
    if (!line.empty() && line[0] != '\t') under = line == path;
    else if (under && line.find(id) != std::string::npos) return true;
  }
  return false;
}

// An idle retained node is no hold. xavier retains a, queues
// for b behind yvonne, and is then cut off (a blackhole: he can act no more
// than a paused process could) for longer than min-wait while yvonne asks
// for a. An owner releases its idle nodes before it queues anywhere, so
// yvonne is granted a, and there is no cycle to revoke.
TEST(DetectorE2E, AnIdleRetainedNodeOfAnOwnerQueuedElsewhereAndCutOffIsNoCycle) {
  const auto zk = test::shared_server().connect_string();
  const auto root = test::unique_path("e2e-retained");
  Running run(config(zk, root, "e2e-retained"));
  ASSERT_TRUE(run.daemon().election().wait_leader(10s));
  test::FaultProxy proxy(test::shared_server().port());
  auto ox = session(proxy.connect_string());
  ox.session_timeout = 10s;  // the cut must not expire it: xavier's nodes stay
  Client cx(ox), cy(session(zk));
  const auto a = root + "/a", b = root + "/b";
  FairMutex xa(cx, a, {.retain = 60s}), xb(cx, b), ya(cy, a), yb(cy, b);
  const AcquireOptions x{.owner = "xavier"}, y{.owner = "yvonne"};
  Lease first = xa.acquire(x);
  const auto idle = first.node_path();
  first.release();
  ASSERT_TRUE(cy.try_stat(idle)) << "not retained";
  Lease held = yb.acquire(y);
  Request x_waits;
  xb.acquire_async(x_waits.callback(), x);
  // Settled: waiting on his blocker's watch. The blackhole drops what he
  // sends while cut off (his validity heartbeat falls due in it), so after
  // the heal the server's next reply is out of order for his C client,
  // which drops the connection: a transient error (ZRUNTIMEINCONSISTENCY)
  // that his wait rides out like any connection loss.
  const int port = test::shared_server().port();
  ASSERT_TRUE(eventually([&] { return watched_by(port, held.node_path(), cx.session_id()); }, 5s))
      << "xavier did not queue for b";
  proxy.blackhole(true);
  Request y_asks;
  ya.acquire_async(y_asks.callback(), y);
  const auto bound = latency_bound(run.cfg().min_wait, run.cfg().interval);
  ASSERT_TRUE(y_asks.wait(bound)) << "yvonne still waits for a: " << y_asks.message();
  EXPECT_TRUE(y_asks.granted()) << y_asks.message();
  // A cycle would be revoked within the bound of yvonne's request.
  const auto revoked = run.wait_for("revoked", 1, bound);
  EXPECT_TRUE(revoked.empty()) << "revoked: " << revoked.front().text;
  EXPECT_FALSE(x_waits.done()) << x_waits.message();
  proxy.blackhole(false);
  Lease ya_lease = y_asks.take_lease();
  ya_lease.release();
  held.release();
  ASSERT_TRUE(x_waits.wait(15s)) << "xavier was never granted b";
  ASSERT_TRUE(x_waits.granted()) << x_waits.message();
  x_waits.take_lease().release();
}

// R1 holds X (shared) and waits for Y; W waits for X behind R1; R2 holds Y
// (shared) and waits for X behind W: R2 -> W is a soft edge (queue order).
TEST(DetectorE2E, ReadWriteSoftEdgeCycleWithFairSharedMutex) {
  const auto zk = test::shared_server().connect_string();
  const auto root = test::unique_path("e2e-rw");
  const auto x = root + "/x", y = root + "/y";
  auto cfg = config(zk, root, "e2e-rw");
  Running run(cfg);
  ASSERT_TRUE(run.daemon().election().wait_leader(10s));
  Client c1(session(zk)), c2(session(zk)), c3(session(zk));
  Actor r1(c1, "R1", 0, true), w(c2, "W", 0, true), r2(c3, "R2", 0, true);
  r1.hold(x, Mode::shared);
  r2.hold(y, Mode::shared);
  auto w_waits = w.enqueue(x, Mode::exclusive);
  auto r2_waits = r2.enqueue(x, Mode::shared);
  const auto closed = Clock::now();
  auto r1_waits = r1.enqueue(y, Mode::exclusive);  // the cycle closes; the youngest wait

  const auto bound = latency_bound(cfg.min_wait, cfg.interval);
  // The record lists {owner, lock, node} per wait, not edge kinds: the
  // victim's message draws every edge plain; the detector's report marks
  // the soft one.
  expect_victim(r1_waits, closed, "R1 -[" + y + "]-> R2 -[" + x + "]-> W -[" + x + "]-> R1", bound, "rw soft edge");
  const auto revoked = run.wait_for("revoked", 1, 5s);
  ASSERT_EQ(revoked.size(), 1u);
  EXPECT_EQ(revoked[0].text, "R1 -[" + y + "]-> R2 ~[" + x + "]~> W -[" + x + "]-> R1");
  print_report(revoked[0], cfg, "rw soft edge");
  EXPECT_FALSE(w_waits.done()) << w_waits.message();
  r1.release_all();  // R1 backs off: W gets X, then R2 after W
  expect_granted(w_waits, "W");
  w.keep(w_waits);
  w.release_all();
  expect_granted(r2_waits, "R2");
  r2.keep(r2_waits);
}

// --mode all: the victim loses its waiting node and every node it holds; its
// held lease hears on_lost(revoked) with the cycle, and the other owner
// proceeds without the victim doing anything.
TEST(DetectorE2E, ModeAllRevokesTheVictimsHeldLocksToo) {
  const auto zk = test::shared_server().connect_string();
  const auto root = test::unique_path("e2e-all");
  auto cfg = config(zk, root, "e2e-all");
  cfg.mode = RevocationMode::all;
  Running run(cfg);
  ASSERT_TRUE(run.daemon().election().wait_leader(10s));
  Client ca(session(zk)), cb(session(zk));
  Actor a(ca, "alice"), b(cb, "bob");
  const auto x = root + "/x", y = root + "/y";
  a.hold(x);
  b.hold(y);
  // Alone in its queue, so not in the scan's snapshot: revoked all the same.
  b.hold(root + "/z");
  const auto lone_node = b.leases()[1].node_path();
  auto lost = std::make_shared<std::promise<std::pair<LossReason, std::string>>>();
  b.leases()[0].on_lost([lost](LossReason r, const std::string& d) { lost->set_value({r, d}); });
  const auto held_node = b.leases()[0].node_path();
  auto a_waits = a.enqueue(y);
  const auto closed = Clock::now();
  auto b_waits = b.enqueue(x);

  const auto cycle = "alice -[" + y + "]-> bob -[" + x + "]-> alice";
  const auto bound = latency_bound(cfg.min_wait, cfg.interval);
  expect_victim(b_waits, closed, cycle, bound, "mode all");
  auto f = lost->get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready) << "bob's held lease heard nothing";
  const auto [reason, detail] = f.get();
  EXPECT_EQ(reason, LossReason::revoked);
  EXPECT_NE(detail.find(cycle), std::string::npos) << detail;
  EXPECT_NE(detail.find("mode all"), std::string::npos) << detail;
  EXPECT_FALSE(b.leases()[0].valid());
  expect_granted(a_waits, "alice, without bob backing off");  // bob still "holds" his lost lease object
  a.keep(a_waits);
  expect_revoked(run, "bob", "mode all");
  const auto rec = read_revocation_record(ca, held_node);
  ASSERT_TRUE(rec) << "no record for the held node " << held_node;
  EXPECT_EQ(rec->mode, "all");
  EXPECT_EQ(cycle_text(*rec), cycle);
  EXPECT_TRUE(eventually([&] { return !b.leases()[1].valid(); }, 10s)) << "bob's lone lease is still valid";
  EXPECT_FALSE(ca.try_stat(lone_node).has_value());
  const auto lone_rec = read_revocation_record(ca, lone_node);
  ASSERT_TRUE(lone_rec) << "no record for the node bob held alone " << lone_node;
  EXPECT_EQ(lone_rec->mode, "all");
  EXPECT_EQ(cycle_text(*lone_rec), cycle);
}

// ===========================================================================
// 2. No revocation under heavy, non-deadlocking contention

TEST(DetectorE2E, NoRevocationUnderHeavyContentionInOneGlobalOrder) {
  int seconds = 20;
  if (const char* e = std::getenv("ZKLOCK_DETECTOR_SOAK_SECONDS")) seconds = std::clamp(std::atoi(e), 1, 60);
  const auto zk = test::shared_server().connect_string();
  const auto root = test::unique_path("e2e-soak");
  auto cfg = config(zk, root, "e2e-soak");
  cfg.min_wait = 50ms;
  cfg.interval = 50ms;
  Running run(cfg);
  ASSERT_TRUE(run.daemon().election().wait_leader(10s));

  constexpr int kSessions = 4, kThreadsPerSession = 2, kLocks = 3;
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < kSessions; ++i) clients.push_back(std::make_unique<Client>(session(zk)));
  std::vector<std::string> locks;
  for (int i = 0; i < kLocks; ++i) locks.push_back(root + "/l" + std::to_string(i));

  std::atomic<std::uint64_t> rounds{0}, acquisitions{0}, long_waits{0}, victims{0}, other_errors{0};
  std::atomic<std::int64_t> longest_wait_us{0};
  std::mutex err_mu;
  std::map<std::string, std::size_t> errors;
  const auto end = Clock::now() + std::chrono::seconds(seconds);
  std::vector<std::jthread> workers;
  for (int s = 0; s < kSessions; ++s) {
    for (int t = 0; t < kThreadsPerSession; ++t) {
      workers.emplace_back([&, s, t](std::stop_token stop) {
        Client& client = *clients[static_cast<std::size_t>(s)];
        const auto owner = "worker-" + std::to_string(s) + "-" + std::to_string(t);
        std::mt19937 rng(static_cast<unsigned>(s * 100 + t));
        std::vector<FairMutex> mutexes;
        for (const auto& l : locks) mutexes.emplace_back(client, l);
        while (Clock::now() < end && !stop.stop_requested()) {
          const unsigned mask = 1 + rng() % ((1u << kLocks) - 1);
          std::vector<Lease> held;
          try {
            for (int i = 0; i < kLocks; ++i) {  // the global order: l0 < l1 < l2
              if (!(mask & (1u << i))) continue;
              const auto asked = Clock::now();
              held.push_back(mutexes[static_cast<std::size_t>(i)].acquire(stop, {.owner = owner}));
              const auto waited = std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - asked);
              ++acquisitions;
              if (waited > cfg.min_wait) ++long_waits;
              auto prev = longest_wait_us.load();
              while (waited.count() > prev && !longest_wait_us.compare_exchange_weak(prev, waited.count())) {
              }
            }
            std::this_thread::sleep_for(std::chrono::microseconds(rng() % 3000));  // the critical section
            ++rounds;
          } catch (const Error& e) {
            if (e.code() == Errc::cancelled) break;
            (e.code() == Errc::deadlock_victim ? victims : other_errors)++;
            std::lock_guard lk(err_mu);
            ++errors[std::string(errc_name(e.code())) + ": " + e.what()];
          }
          for (auto it = held.rbegin(); it != held.rend(); ++it) it->release();
        }
      });
    }
  }
  for (auto& w : workers) w.join();

  const auto& m = run.daemon().metrics();
  const auto outcomes = run.outcomes();
  std::printf(
      "[ soak     ] %d s, %d sessions x %d owners, %d locks, min-wait %lld ms, interval %lld ms:\n"
      "[ soak     ] %llu rounds, %llu acquisitions (%.0f/s), %llu waits longer than min-wait, longest wait %.3f s\n"
      "[ soak     ] detector: %llu scans, %llu cycles detected, revocations: revoked %llu, aborted %llu, failed %llu; "
      "victims %llu, other errors %llu\n",
      seconds, kSessions, kThreadsPerSession, kLocks, static_cast<long long>(cfg.min_wait.count()),
      static_cast<long long>(cfg.interval.count()), static_cast<unsigned long long>(rounds.load()),
      static_cast<unsigned long long>(acquisitions.load()), static_cast<double>(acquisitions.load()) / seconds,
      static_cast<unsigned long long>(long_waits.load()), static_cast<double>(longest_wait_us.load()) / 1e6,
      static_cast<unsigned long long>(m.scans()), static_cast<unsigned long long>(m.cycles_detected()),
      static_cast<unsigned long long>(m.revocations("revoked")), static_cast<unsigned long long>(m.aborted()),
      static_cast<unsigned long long>(m.revocations("failed")), static_cast<unsigned long long>(victims.load()),
      static_cast<unsigned long long>(other_errors.load()));
  for (const auto& [what, n] : errors) std::printf("[ soak     ] error x%zu: %s\n", n, what.c_str());
  EXPECT_EQ(m.revocations("revoked"), 0u);
  EXPECT_EQ(victims.load(), 0u);
  EXPECT_EQ(other_errors.load(), 0u);
  EXPECT_EQ(outcomes.count("revoked"), 0u);
  EXPECT_GT(rounds.load(), static_cast<std::uint64_t>(seconds) * 20) << "too little contention to mean anything";
  EXPECT_GT(m.scans(), static_cast<std::uint64_t>(seconds) * 10);
}

// ===========================================================================
// 3. Leader failover with real processes

TEST(DetectorE2E, KillNineTheLeaderProcessAndTheStandbyRevokesTheNextCycle) {
  const auto zk = test::shared_server().connect_string();
  const auto root = test::unique_path("e2e-ha");
  TempDir dir;
  const auto tag = std::to_string(::getpid()) + "-" + root.substr(1);
  const auto first_id = "ha-first-" + tag, second_id = "ha-second-" + tag;
  Client admin(session(zk));

  DetectorProcess first(dir.path, "first", detector_args(zk, root, first_id));
  ASSERT_TRUE(first.wait_line({"now the leader"}, 20s)) << first.log();
  DetectorProcess second(dir.path, "second", detector_args(zk, root, second_id));
  std::optional<std::string> second_candidate;
  ASSERT_TRUE(eventually([&] { return (second_candidate = candidate_of(admin, second_id)).has_value(); }, 20s))
      << second.log();
  ASSERT_FALSE(second.wait_line({"now the leader"}, 0ms)) << "two leaders: " << second.log();

  const auto killed = Clock::now();
  first.child().signal(SIGKILL);
  ASSERT_TRUE(first.child().wait_exit(5s));
  const auto line = second.wait_line({"now the leader"}, 15s);
  const auto takeover = Clock::now() - killed;
  ASSERT_TRUE(line) << second.log();
  std::printf("[ failover ] kill -9 of the leader -> standby leads after %.3f s (session timeout 4 s)\n",
              secs(takeover));
  EXPECT_LE(takeover, 4s + 1s);
  EXPECT_FALSE(candidate_of(admin, first_id)) << "the dead leader's node outlived its session";

  Client ca(session(zk)), cb(session(zk));
  Actor a(ca, "alice"), b(cb, "bob");
  auto c = cross_order(a, b, root + "/x", root + "/y");
  const auto bound = latency_bound(500ms, 200ms);
  expect_victim(c.b_waits, c.closed, "alice -[" + root + "/y]-> bob -[" + root + "/x]-> alice", bound, "failover");
  EXPECT_NE(c.b_waits.message().find("deadlock detector " + second_id), std::string::npos) << c.b_waits.message();
  b.release_all();
  expect_granted(c.a_waits, "alice");
  const auto revoked = second.wait_line({"outcome revoked", root}, 5s);
  ASSERT_TRUE(revoked) << second.log();
  print_logged_latency(*revoked, bound, "failover");
  EXPECT_EQ(second.child().terminate(5s).describe(), "exit 0");
  EXPECT_FALSE(candidate_of(admin, second_id)) << "SIGTERM must delete the leader node";
}

// ===========================================================================
// 4. Security: digest auth and ACLs

TEST(DetectorE2E, WithDigestAuthAndAclsStrangersCannotTouchLocksOrForgeRecordsButTheDetectorRevokes) {
  test::ZkServer server;  // own server: /zklock's ACLs are the subject
  server.start();
  const auto zk = server.connect_string();
  const auto root = "/secure-locks";
  const auto x = std::string(root) + "/x", y = std::string(root) + "/y";
  const DigestCredentials admin{"admin", "admin-pw"}, alice{"alice", "alice-pw"}, bob{"bob", "bob-pw"},
      detector{"detector", "detector-pw"}, inspector{"inspector", "inspector-pw"};
  auto id = [](const DigestCredentials& c) { return digest_acl_id(c.user, c.password); };
  constexpr int lock_user = perm::read | perm::create | perm::remove | perm::write;
  // Lock parents: the lock users and the detector create, delete, write (and
  // list); inspectors read; nobody else anything.
  const std::vector<AclEntry> lock_parent_acl{{"digest", id(admin), perm::all},
                                              {"digest", id(alice), lock_user},
                                              {"digest", id(bob), lock_user},
                                              {"digest", id(detector), lock_user},
                                              {"digest", id(inspector), perm::read}};
  // /zklock/revocations and /zklock/detector: the detector (and the admin) write; anyone reads.
  const std::vector<AclEntry> detector_only_acl{{"digest", id(admin), perm::all},
                                                {"digest", id(detector), perm::all},
                                                {"world", "anyone", perm::read}};
  const std::vector<AclEntry> admin_world_read{{"digest", id(admin), perm::all}, {"world", "anyone", perm::read}};
  {
    auto o = session(zk, admin);
    o.acl = admin_world_read;
    Client setup(o);
    setup.ensure_path("/zklock", CreateMode::persistent);
    setup.ensemble_id();  // /zklock/ensemble-id, world-readable
    o.acl = detector_only_acl;
    Client setup2(o);
    setup2.ensure_path(std::string(kRevocationsPath), CreateMode::persistent);
    setup2.ensure_path(std::string(kElectionPath), CreateMode::persistent);
    o.acl = lock_parent_acl;
    Client setup3(o);
    setup3.ensure_path(x, CreateMode::persistent);
    setup3.ensure_path(y, CreateMode::persistent);
  }

  TempDir dir;
  const auto auth_file = dir.path / "detector.auth";
  std::ofstream(auth_file) << detector.user << ":" << detector.password << "\n";
  auto args = detector_args(zk, root, "secure-detector");
  args.insert(args.end(), {"--auth-file", auth_file.string()});
  DetectorProcess det(dir.path, "detector", args);
  ASSERT_TRUE(det.wait_line({"now the leader"}, 20s)) << det.log();

  Client ca(session(zk, alice)), cb(session(zk, bob)), stranger(session(zk)), cb2(session(zk, bob)),
      look(session(zk, inspector));
  Actor a(ca, "alice"), b(cb, "bob");
  a.hold(x);
  const auto alice_node = a.leases()[0].node_path();

  auto code = [](auto&& op) -> std::optional<Errc> {
    try {
      op();
    } catch (const Error& e) {
      return e.code();
    }
    return std::nullopt;
  };
  auto async_status = [](auto start) {
    std::promise<Status> p;
    start([&p](Status s) { p.set_value(s); });
    auto f = p.get_future();
    require(f.wait_for(10s) == std::future_status::ready, "no answer within 10 s");
    return f.get();
  };

  // The stranger (no credentials) cannot take a lock...
  FairMutex strangers_x(stranger, x);
  EXPECT_EQ(code([&] { (void)strangers_x.try_acquire_for(5s, {.owner = "mallory"}); }), Errc::no_auth);
  // ...nor create a node under a lock parent directly, nor list it...
  const auto forged_name = lock_node_prefix(Mode::exclusive, owner_key("mallory"), new_guid());
  EXPECT_TRUE(async_status([&](auto done) {
                stranger.create_async(x + "/" + forged_name, "", CreateMode::ephemeral_sequential,
                                      [done](Status s, const std::string&, const Stat&) { done(s); });
              }).is(Errc::no_auth));
  EXPECT_EQ(code([&] { stranger.children(x); }), Errc::no_auth);
  // ...nor delete alice's node...
  EXPECT_TRUE(async_status([&](auto done) { stranger.remove_async(alice_node, -1, done); }).is(Errc::no_auth));
  // ...nor revoke it the way the detector does...
  RevocationRequest req;
  req.victims = {{alice_node, "alice", 0}};
  req.checks = {alice_node};
  req.record.policy = "operator";
  req.record.detector = "mallory";
  req.record.reason = "forged";
  const auto forged = revoke(stranger, req);
  EXPECT_EQ(forged.outcome, RevokeOutcome::failed) << forged.detail;
  EXPECT_TRUE(forged.status.is(Errc::no_auth)) << forged.detail;
  // ...nor forge a revocation record, and neither can an authenticated lock user.
  RevocationRecord fake;
  fake.victim_node = alice_node;
  fake.policy = "youngest";
  fake.detector = "mallory";
  for (Client* c : {&stranger, &cb2}) {
    EXPECT_TRUE(async_status([&](auto done) {
                  c->create_async(revocation_record_path(alice_node), encode_revocation_record(fake),
                                  CreateMode::persistent,
                                  [done](Status s, const std::string&, const Stat&) { done(s); });
                }).is(Errc::no_auth));
  }
  // An inspector reads but cannot create.
  EXPECT_EQ(look.children(x).size(), 1u);
  EXPECT_TRUE(async_status([&](auto done) {
                look.create_async(x + "/" + forged_name, "", CreateMode::ephemeral_sequential,
                                  [done](Status s, const std::string&, const Stat&) { done(s); });
              }).is(Errc::no_auth));
  EXPECT_TRUE(ca.try_stat(alice_node)) << "alice's node survived every attempt";
  EXPECT_FALSE(ca.try_stat(revocation_record_path(alice_node)));

  // The detector, authenticated, does revoke a real deadlock.
  b.hold(y);
  auto a_waits = a.enqueue(y);
  const auto closed = Clock::now();
  auto b_waits = b.enqueue(x);
  const auto bound = latency_bound(500ms, 200ms);
  expect_victim(b_waits, closed, "alice -[" + y + "]-> bob -[" + x + "]-> alice", bound, "secure");
  EXPECT_NE(b_waits.message().find("deadlock detector secure-detector"), std::string::npos) << b_waits.message();
  b.release_all();
  expect_granted(a_waits, "alice");
  a.keep(a_waits);
  const auto line = det.wait_line({"outcome revoked"}, 5s);
  ASSERT_TRUE(line) << det.log();
  print_logged_latency(*line, bound, "secure");

  // The documented limit: an authenticated lock user may delete anyone's
  // node under a lock parent it may use (ZooKeeper checks DELETE on the
  // parent only). Alice's lease hears about it at once.
  auto lost = std::make_shared<std::promise<std::string>>();
  a.leases()[0].on_lost([lost](LossReason, const std::string& d) { lost->set_value(d); });
  EXPECT_TRUE(async_status([&](auto done) { cb2.remove_async(alice_node, -1, done); }).ok());
  auto f = lost->get_future();
  ASSERT_EQ(f.wait_for(10s), std::future_status::ready);
  EXPECT_NE(f.get().find("no revocation record"), std::string::npos);
  EXPECT_EQ(det.child().terminate(5s).describe(), "exit 0");
}

// ===========================================================================
// 5. Surviving ZooKeeper and its own session

// A restarted server keeps the session (its timers restart): the C client
// re-registers the mirror's watches, and a cycle formed after the restart is
// seen through them (the periodic full resync is far away).
TEST(DetectorE2E, SurvivesAZooKeeperRestart) {
  test::ZkServer server;
  server.start();
  const auto zk = server.connect_string();
  const auto root = test::unique_path("e2e-restart");
  const auto x = root + "/x", y = root + "/y";
  {
    Client setup(session(zk));
    setup.ensure_path(x, CreateMode::persistent);
    setup.ensure_path(y, CreateMode::persistent);
  }
  auto cfg = config(zk, root, "e2e-restart");
  cfg.resync_interval = 10min;
  Running run(cfg);
  ASSERT_TRUE(run.daemon().election().wait_leader(10s));
  ASSERT_TRUE(run.daemon().mirror().wait_idle(10s));
  ASSERT_EQ(run.daemon().mirror().stats().dirs, 3u);
  const auto sid = run.daemon().client().session_id();
  const auto resyncs = run.daemon().mirror().stats().resyncs;

  const auto down = Clock::now();
  server.stop();
  server.start();
  ASSERT_TRUE(run.daemon().client().wait_connected(20s));
  std::printf("[ restart  ] ZooKeeper down and back in %.3f s; detector session kept: %s\n", secs(Clock::now() - down),
              run.daemon().client().session_id() == sid ? "yes" : "no");
  EXPECT_EQ(run.daemon().client().session_id(), sid);
  EXPECT_EQ(run.daemon().mirror().stats().resyncs, resyncs) << "watches, not a resync, must carry the mirror";
  ASSERT_TRUE(run.daemon().election().wait_leader(10s));

  Client ca(session(zk)), cb(session(zk));
  Actor a(ca, "alice"), b(cb, "bob");
  auto c = cross_order(a, b, x, y);
  expect_victim(c.b_waits, c.closed, "alice -[" + y + "]-> bob -[" + x + "]-> alice",
                latency_bound(cfg.min_wait, cfg.interval), "after restart");
  expect_revoked(run, "bob", "after restart");
  b.release_all();
  expect_granted(c.a_waits, "alice");
}

// The detector's own session expires (it is partitioned away through a
// relay while ZooKeeper runs on): it opens a new session, re-mirrors the
// tree, re-enters the election, and breaks a cycle that formed while it was
// away as well as one formed afterwards.
TEST(DetectorE2E, SurvivesItsOwnSessionExpiryAndReMirrors) {
  auto& server = test::shared_server();
  const auto zk = server.connect_string();
  test::FaultProxy relay(server.port());
  const auto root = test::unique_path("e2e-expiry");
  auto cfg = config(relay.connect_string(), root, "e2e-expiry");
  cfg.session_timeout = 2s;
  cfg.resync_interval = 10min;
  Running run(cfg);
  ASSERT_TRUE(run.daemon().election().wait_leader(10s));
  const auto candidate = *run.daemon().election().candidate_node();
  Client admin(session(zk));
  admin.ensure_path(root, CreateMode::persistent);
  ASSERT_TRUE(eventually([&] { return run.daemon().mirror().stats().dirs >= 1 && run.daemon().mirror().idle(); }, 10s));

  relay.refuse(true);  // partition: refuse new connections, cut the open ones
  relay.cut();
  const auto cut = Clock::now();
  ASSERT_TRUE(eventually([&] { return !admin.try_stat(candidate); }, 15s)) << "the server never expired the detector";
  std::printf("[ expiry   ] the server expired the partitioned detector's session after %.3f s\n",
              secs(Clock::now() - cut));

  // A deadlock forms while the detector is away.
  Client c1(session(zk)), c2(session(zk));
  Actor a(c1, "alice"), b(c2, "bob");
  auto first = cross_order(a, b, root + "/x", root + "/y");

  relay.refuse(false);
  const auto healed = Clock::now();
  const auto bound = latency_bound(cfg.min_wait, cfg.interval);
  const auto away_cycle = "alice -[" + root + "/y]-> bob -[" + root + "/x]-> alice";
  ASSERT_TRUE(first.b_waits.wait(20s)) << "the cycle formed during the partition was never broken";
  EXPECT_EQ(first.b_waits.error(), Errc::deadlock_victim) << first.b_waits.message();
  EXPECT_NE(first.b_waits.message().find(away_cycle), std::string::npos) << first.b_waits.message();
  std::printf("[ latency  ] expiry: partition healed -> cycle from the partition broken in %.3f s "
              "(new session + re-mirror + min-wait already passed)\n",
              secs(first.b_waits.at() - healed));
  EXPECT_LE(first.b_waits.at() - healed, cfg.session_timeout + bound);
  EXPECT_EQ(run.daemon().client().session_epoch(), 2u);
  EXPECT_GE(run.daemon().mirror().stats().resyncs, 2u) << "a new session re-lists the tree";
  EXPECT_TRUE(run.daemon().is_leader());
  EXPECT_NE(run.daemon().election().candidate_node(), candidate);
  b.release_all();
  expect_granted(first.a_waits, "alice");
  a.keep(first.a_waits);
  a.release_all();

  // And a new cycle, on lock paths born after the new session, within the bound.
  Client c3(session(zk)), c4(session(zk));
  Actor p(c3, "carol"), q(c4, "dave");
  auto second = cross_order(p, q, root + "/p", root + "/q");
  expect_victim(second.b_waits, second.closed, "carol -[" + root + "/q]-> dave -[" + root + "/p]-> carol", bound,
                "after expiry");
  const auto revoked = run.wait_for("revoked", 2, 5s);
  ASSERT_EQ(revoked.size(), 2u);
  print_report(revoked[1], cfg, "after expiry");
  q.release_all();
  expect_granted(second.a_waits, "carol");
}

// ===========================================================================
// 6. Record pruning

TEST(DetectorE2E, TheLeaderPrunesRevocationRecordsToTheNewestN) {
  test::ZkServer server;  // own server: pruning is global to /zklock/revocations
  server.start();
  const auto zk = server.connect_string();
  const auto root = test::unique_path("e2e-prune");
  Client admin(session(zk));
  admin.ensure_path(std::string(kRevocationsPath), CreateMode::persistent);
  std::vector<std::string> seeded;
  for (int i = 0; i < 5; ++i) {
    RevocationRecord r;
    r.victim_node = root + "/old/" + lock_node_prefix(Mode::exclusive, owner_key("old"), new_guid()) + "000000000" +
                    std::to_string(i);
    r.victim_owner = "old";
    r.policy = "operator";
    r.detector = "seed";
    r.reason = "seeded record " + std::to_string(i);
    const auto path = revocation_record_path(r.victim_node);
    ASSERT_NO_THROW(admin.create(path, encode_revocation_record(r), CreateMode::persistent));
    seeded.push_back(path.substr(std::string(kRevocationsPath).size() + 1));
  }

  auto cfg = config(zk, root, "e2e-prune");
  cfg.keep_records = 3;
  cfg.prune_interval = 300ms;
  Running run(cfg);
  ASSERT_TRUE(run.daemon().election().wait_leader(10s));
  Client ca(session(zk)), cb(session(zk));
  Actor a(ca, "alice"), b(cb, "bob");
  auto c = cross_order(a, b, root + "/x", root + "/y");
  expect_victim(c.b_waits, c.closed, "alice -[" + root + "/y]-> bob -[" + root + "/x]-> alice",
                latency_bound(cfg.min_wait, cfg.interval), "prune");
  expect_revoked(run, "bob", "prune");
  const auto victim_record = [&] {
    const auto revoked = run.wait_for("revoked", 1, 1s);
    return split_path(revoked.at(0).victim.node).second;
  }();

  const std::set<std::string> expected{seeded[3], seeded[4], victim_record};
  std::set<std::string> left;
  EXPECT_TRUE(eventually(
      [&] {
        const auto names = admin.children(std::string(kRevocationsPath));
        left = {names.begin(), names.end()};
        return left == expected;
      },
      10s))
      << "left: " << left.size() << " records";
  std::printf("[ prune    ] 6 records, --keep-records 3: the newest 3 kept (%zu left)\n", left.size());
  b.release_all();
  expect_granted(c.a_waits, "alice");
}

}  // namespace
}  // namespace zklock::detector
