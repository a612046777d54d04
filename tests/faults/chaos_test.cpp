// The chaos run: several worker processes loop acquire →
// write-with-token to the fenced store → release, while a seeded driver
// freezes holders past their session timeout, kills workers and restarts the
// ZooKeeper server. Afterwards the store's accepted-write history must show
// no stale write accepted and no overlap: ordered by acceptance, the fences
// never go down (a token once superseded never writes again), and every
// write a worker saw accepted (rejected) is (is not) in the history.
//
// The history is kept by SQLite triggers on fenced-store's own table, so the
// real fenced-store binary decides every write and the log is written in the
// same transaction as the write it records.
//
//   ZKLOCK_CHAOS_SECONDS  length of the chaos phase (default 60; CI keeps it
//                         under two minutes in all)
//   ZKLOCK_CHAOS_SEED     replays a run; the seed is printed at the start
#include <gtest/gtest.h>
#include <sqlite3.h>

#include <algorithm>
#include <cstdio>
#include <random>
#include <set>

#include "story_support.hpp"

namespace zklock::stories {
namespace {

using test::ZkServer;

constexpr int kWorkers = 4;
constexpr int kSessionMs = 1000;

std::uint64_t env_or(const char* name, std::uint64_t fallback) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return fallback;
  return std::strtoull(v, nullptr, 10);
}

void sql(sqlite3* db, const char* statement) {
  char* err = nullptr;
  if (sqlite3_exec(db, statement, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : "?";
    sqlite3_free(err);
    throw StoryError(std::string("sqlite: ") + msg + " in: " + statement);
  }
}

struct Accepted {
  std::int64_t seq = 0;
  std::string value;
  std::int64_t fence = 0;
  std::string source;
};

// Creates fenced-store's schema (one put) and the history triggers.
void prepare_store(const std::string& db) {
  const auto put = test::run_to_exit(
      {.argv = {FENCED_STORE_BIN, "--db", db, "put", "setup", "x", "--token", "00000000-0000-4000-8000-000000000000:1"}},
      10000ms);
  if (put.code != 0) throw StoryError("fenced-store setup put failed: " + put.describe());
  sqlite3* h = nullptr;
  if (sqlite3_open(db.c_str(), &h) != SQLITE_OK) throw StoryError("sqlite3_open failed");
  sqlite3_busy_timeout(h, 5000);
  sql(h,
      "CREATE TABLE history (seq INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT, value BLOB, fence INTEGER, "
      "source TEXT);"
      "CREATE TRIGGER history_insert AFTER INSERT ON kv BEGIN "
      "  INSERT INTO history (key, value, fence, source) VALUES (NEW.key, NEW.value, NEW.fence, NEW.source); END;"
      "CREATE TRIGGER history_update AFTER UPDATE ON kv BEGIN "
      "  INSERT INTO history (key, value, fence, source) VALUES (NEW.key, NEW.value, NEW.fence, NEW.source); END;");
  sqlite3_close(h);
}

std::vector<Accepted> read_history(const std::string& db, const std::string& key) {
  sqlite3* h = nullptr;
  if (sqlite3_open(db.c_str(), &h) != SQLITE_OK) throw StoryError("sqlite3_open failed");
  sqlite3_busy_timeout(h, 5000);
  sqlite3_stmt* st = nullptr;
  sqlite3_prepare_v2(h, "SELECT seq, value, fence, source FROM history WHERE key = ?1 ORDER BY seq", -1, &st, nullptr);
  sqlite3_bind_text(st, 1, key.c_str(), -1, SQLITE_TRANSIENT);
  std::vector<Accepted> out;
  while (sqlite3_step(st) == SQLITE_ROW) {
    Accepted a;
    a.seq = sqlite3_column_int64(st, 0);
    a.value = reinterpret_cast<const char*>(sqlite3_column_text(st, 1));
    a.fence = sqlite3_column_int64(st, 2);
    a.source = reinterpret_cast<const char*>(sqlite3_column_text(st, 3));
    out.push_back(a);
  }
  sqlite3_finalize(st);
  sqlite3_close(h);
  return out;
}

class Chaos {
 public:
  Chaos(ZkServer& zk, std::string db, std::string lock, std::uint64_t seed)
      : zk_(zk), db_(std::move(db)), lock_(std::move(lock)), rng_(seed) {}

  void spawn(int slot) {
    WorkerConfig c;
    c.name = "W" + std::to_string(slot) + "." + std::to_string(incarnation_[slot]++);
    c.connect = zk_.connect_string();
    c.lock = lock_;
    c.db = db_;
    c.session_timeout_ms = kSessionMs;
    c.connect_timeout_ms = 5000;
    c.acquire_timeout_ms = 3000;
    c.loop = true;
    c.hold_ms = 100;
    c.writes = 3;
    c.key = "chaos";
    live_[slot] = StoryWorker::start(c);
  }

  void start() {
    for (int i = 0; i < kWorkers; ++i) spawn(i);
  }

  // Reads every worker's output; replaces workers that died (unless stopping).
  void pump(bool respawn = true) {
    for (int i = 0; i < kWorkers; ++i) {
      auto& w = live_[i];
      while (w.next(0ms)) {
      }
      if (respawn && frozen_ != i && !w.process().running()) {
        while (w.next(0ms)) {
        }
        retired_.push_back(std::move(w));
        spawn(i);
      }
    }
  }
  void pump_for(milliseconds d, bool respawn = true) {
    auto until = test::Clock::now() + d;
    while (test::Clock::now() < until) {
      pump(respawn);
      ::usleep(5000);
    }
  }

  // The worker that currently reports holding the lock, if any.
  int holder() const {
    for (int i = 0; i < kWorkers; ++i) {
      int open = 0;
      for (auto& e : live_[i].events()) {
        if (e.kind == "acquired") ++open;
        if (e.kind == "releasing" || e.kind == "lost") open = std::max(0, open - 1);
      }
      if (open > 0) return i;
    }
    return -1;
  }

  void run(milliseconds duration) {
    start();
    const auto end = test::Clock::now() + duration;
    std::uniform_int_distribution<int> gap(300, 1200), action(0, 9), extra(100, 1200), down(0, 1500),
        pick(0, kWorkers - 1);
    while (test::Clock::now() < end) {
      pump_for(milliseconds(gap(rng_)));
      const int a = action(rng_);
      if (a < 4) {  // freeze a holder (or anyone) past the session timeout
        int victim = holder();
        if (victim < 0) victim = pick(rng_);
        frozen_ = victim;
        ::kill(live_[victim].pid(), SIGSTOP);  // the worker only, not a store write it started
        ++pauses_;
        pump_for(milliseconds(kSessionMs + extra(rng_)));
        ::kill(live_[victim].pid(), SIGCONT);
        frozen_ = -1;
      } else if (a < 6) {  // kill a worker (a holder when there is one)
        int victim = a == 4 ? holder() : pick(rng_);
        if (victim < 0) victim = pick(rng_);
        live_[victim].signal(SIGKILL);
        ++kills_;
      } else if (a < 7) {  // restart the server, sometimes past the session timeout
        zk_.stop();
        pump_for(milliseconds(down(rng_)));
        zk_.start();
        ++restarts_;
      }
    }
    // Stop: SIGTERM ends each loop after its current round.
    for (auto& w : live_) ::kill(w.pid(), SIGTERM);  // the worker, not a store write in flight
    auto until = test::Clock::now() + 15000ms;
    while (test::Clock::now() < until) {
      pump(false);
      bool any = false;
      for (auto& w : live_) any = any || w.process().running();
      if (!any) break;
      ::usleep(5000);
    }
    for (auto& w : live_) {
      w.signal(SIGKILL);
      while (w.next(0ms)) {
      }
      retired_.push_back(std::move(w));
    }
  }

  const std::vector<StoryWorker>& workers() const { return retired_; }
  int pauses() const { return pauses_; }
  int kills() const { return kills_; }
  int restarts() const { return restarts_; }

 private:
  ZkServer& zk_;
  std::string db_, lock_;
  std::mt19937_64 rng_;
  StoryWorker live_[kWorkers];
  int incarnation_[kWorkers] = {};
  std::vector<StoryWorker> retired_;
  int frozen_ = -1;
  int pauses_ = 0, kills_ = 0, restarts_ = 0;
};

TEST(Chaos, FreezeKillRestartNoStaleWriteAccepted) {
  const std::uint64_t seed = env_or("ZKLOCK_CHAOS_SEED", std::random_device{}());
  const std::uint64_t seconds = env_or("ZKLOCK_CHAOS_SECONDS", 60);
  std::printf("[chaos] seed=%llu seconds=%llu (replay with ZKLOCK_CHAOS_SEED=%llu)\n",
              static_cast<unsigned long long>(seed), static_cast<unsigned long long>(seconds),
              static_cast<unsigned long long>(seed));
  std::fflush(stdout);

  ZkServer zk;
  zk.start();
  TempDir dir;
  const std::string db = (dir / "store.db").string();
  prepare_store(db);
  Chaos chaos(zk, db, test::unique_path("chaos"), seed);
  chaos.run(std::chrono::seconds(seconds));

  // What the workers saw.
  int acquisitions = 0, accepted = 0, rejected = 0, store_errors = 0, invalid_attempts = 0;
  std::set<std::string> seen_accepted, seen_rejected;
  for (auto& w : chaos.workers()) {
    for (auto& e : w.events()) {
      if (e.kind == "acquired") ++acquisitions;
      if (e.kind != "write") continue;
      if (e.get("valid_before") == "0") ++invalid_attempts;
      if (e.get("rc") == "0") ++accepted, seen_accepted.insert(e.get("value"));
      else if (e.get("rc") == "65") ++rejected, seen_rejected.insert(e.get("value"));
      else ++store_errors;
    }
  }

  // What the store accepted, in order.
  const auto history = read_history(db, "chaos");
  std::int64_t highest = 0;
  int stale_accepted = 0;
  std::string source;
  std::set<std::string> in_history;
  for (auto& h : history) {
    if (h.fence < highest) {
      ++stale_accepted;
      ADD_FAILURE() << "stale write accepted: " << h.value << " fence " << h.fence << " after " << highest;
    }
    highest = std::max(highest, h.fence);
    if (source.empty()) source = h.source;
    EXPECT_EQ(h.source, source);
    in_history.insert(h.value);
  }
  // Overlap: a token that wrote must not write again once a later token has.
  std::map<std::int64_t, std::pair<std::int64_t, std::int64_t>> span;  // fence -> first, last seq
  for (auto& h : history) {
    auto [it, fresh] = span.try_emplace(h.fence, h.seq, h.seq);
    if (!fresh) it->second.second = h.seq;
  }
  int overlaps = 0;
  for (auto it = span.begin(); it != span.end() && std::next(it) != span.end(); ++it) {
    if (it->second.second > std::next(it)->second.first) ++overlaps;
  }
  EXPECT_EQ(stale_accepted, 0);
  EXPECT_EQ(overlaps, 0) << "accepted writes of two holders interleave";
  for (auto& v : seen_accepted) EXPECT_TRUE(in_history.count(v)) << "accepted write missing from history: " << v;
  for (auto& v : seen_rejected) EXPECT_FALSE(in_history.count(v)) << "rejected write in history: " << v;
  EXPECT_GT(acquisitions, 10) << "the run made too little progress";

  std::printf("[chaos] seed=%llu: %d acquisitions, %d pauses injected, %d kills, %d server restarts; "
              "writes: %d accepted (%zu in the store's history), %d stale writes rejected, %d store errors, "
              "%d written after valid() said no; stale accepted %d, overlapping %d\n",
              static_cast<unsigned long long>(seed), acquisitions, chaos.pauses(), chaos.kills(), chaos.restarts(),
              accepted, history.size(), rejected, store_errors, invalid_attempts, stale_accepted, overlaps);
  std::fflush(stdout);
}

}  // namespace
}  // namespace zklock::stories
