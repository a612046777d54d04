// Runs the real fenced-store binary as a child process: exit codes, messages,
// stale and foreign-source rejection, and concurrent writers from several
// processes on one database.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "child_process.hpp"
#include "harness_base.hpp"
#include "zklock/token.hpp"

#ifndef FENCED_STORE_BIN
#error "FENCED_STORE_BIN must name the fenced-store executable"
#endif

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

const std::string kId = "0b6f6a52-4f0e-4c55-9d7e-3f1f2d9c1a10";
const std::string kOther = "11111111-2222-4333-8444-555555555555";

std::string tok(std::int64_t czxid, const std::string& id = kId) { return id + ":" + std::to_string(czxid); }

// Its exit code (128 + signal if killed), stdout, stderr.
using Outcome = zklock::test::RunResult;

// Runs fenced-store with `args` in directory `cwd` (bounded: 60 s). The
// child's environment is ours without FENCED_STORE_DB, plus `env`
// ("NAME=value" each).
Outcome run(const fs::path& cwd, const std::vector<std::string>& args, const std::vector<std::string>& env = {}) {
  zklock::test::SpawnOptions o;
  o.argv = {FENCED_STORE_BIN};
  o.argv.insert(o.argv.end(), args.begin(), args.end());
  o.cwd = cwd;
  o.env_drop_prefixes = {"FENCED_STORE_DB"};
  for (const auto& e : env) {
    const auto eq = e.find('=');
    o.env.emplace_back(e.substr(0, eq), eq == std::string::npos ? "" : e.substr(eq + 1));
  }
  return zklock::test::run_to_exit(std::move(o), 60s);
}

std::size_t count_lines(const std::string& s) { return static_cast<std::size_t>(std::count(s.begin(), s.end(), '\n')); }

class FencedStore : public ::testing::Test {
 protected:
  Outcome put(const std::string& key, const std::string& value, const std::string& token) {
    return run(dir_, {"put", key, value, "--token", token});
  }
  Outcome get(const std::string& key) { return run(dir_, {"get", key}); }

  zklock::test::TempDir tmp_{"zklock-fenced-store-"};  // removed with everything in it
  fs::path dir_ = tmp_.path();
};

TEST_F(FencedStore, PutThenGet) {
  auto p = put("invoice-42", "paid", tok(100));
  EXPECT_EQ(p.code, 0) << p.err;
  EXPECT_EQ(p.out, "");
  EXPECT_EQ(p.err, "");
  auto g = get("invoice-42");
  EXPECT_EQ(g.code, 0) << g.err;
  EXPECT_EQ(g.out, "paid\n");
  EXPECT_TRUE(fs::exists(dir_ / "fenced-store.db"));  // the default path, in the working directory
}

TEST_F(FencedStore, ValuesComeBackExactly) {
  const std::string value = "two words, 'quotes', tabs\tand \xc3\xa9";
  ASSERT_EQ(put("k", value, tok(1)).code, 0);
  EXPECT_EQ(get("k").out, value + "\n");
  ASSERT_EQ(put("empty", "", tok(1)).code, 0);
  EXPECT_EQ(get("empty").out, "\n");
}

TEST_F(FencedStore, GetOfMissingKeyExits66) {
  auto g = get("nope");
  EXPECT_EQ(g.code, 66);
  EXPECT_EQ(g.out, "");
  EXPECT_EQ(count_lines(g.err), 1u) << g.err;
  EXPECT_NE(g.err.find("nope"), std::string::npos);
}

TEST_F(FencedStore, StaleTokenIsRejectedWith65AndLeavesTheValue) {
  ASSERT_EQ(put("k", "from-300", tok(300)).code, 0);
  auto p = put("k", "from-299", tok(299));
  EXPECT_EQ(p.code, 65);
  EXPECT_EQ(count_lines(p.err), 1u) << p.err;
  EXPECT_NE(p.err.find("stale"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find(tok(299)), std::string::npos) << p.err;
  EXPECT_NE(p.err.find(tok(300)), std::string::npos) << p.err;
  EXPECT_EQ(get("k").out, "from-300\n");
}

TEST_F(FencedStore, SameTokenMayWriteAgainAndHigherRaises) {
  ASSERT_EQ(put("k", "a", tok(300)).code, 0);
  EXPECT_EQ(put("k", "b", tok(300)).code, 0);
  EXPECT_EQ(get("k").out, "b\n");
  EXPECT_EQ(put("k", "c", tok(301)).code, 0);
  EXPECT_EQ(put("k", "d", tok(300)).code, 65);
  EXPECT_EQ(get("k").out, "c\n");
}

TEST_F(FencedStore, TokenFromAnotherEnsembleIsRejectedEvenWhenLarger) {
  ASSERT_EQ(put("k", "ours", tok(300)).code, 0);
  auto p = put("k", "theirs", tok(999999999, kOther));
  EXPECT_EQ(p.code, 65);
  EXPECT_EQ(count_lines(p.err), 1u) << p.err;
  EXPECT_NE(p.err.find(kOther), std::string::npos) << p.err;
  EXPECT_NE(p.err.find(kId), std::string::npos) << p.err;
  EXPECT_EQ(get("k").out, "ours\n");
}

TEST_F(FencedStore, FirstAcceptedWriteFixesTheKeysSource) {
  ASSERT_EQ(put("k", "theirs", tok(5, kOther)).code, 0);
  EXPECT_EQ(put("k", "ours", tok(500)).code, 65);
  EXPECT_EQ(put("k", "theirs again", tok(6, kOther)).code, 0);
  EXPECT_EQ(get("k").out, "theirs again\n");
  EXPECT_EQ(put("other-key", "ours", tok(500)).code, 0);  // per key, not per database
}

// Keys guarded by one lock name one fence: a token the fence has passed
// beyond is refused on every key of it, including keys it never wrote.
TEST_F(FencedStore, KeysSharingAFenceShareItsHighestToken) {
  ASSERT_EQ(run(dir_, {"put", "balance", "100", "--fence", "account-7", "--token", tok(300)}).code, 0);
  ASSERT_EQ(run(dir_, {"put", "balance", "50", "--fence", "account-7", "--token", tok(400)}).code, 0);
  auto p = run(dir_, {"put", "history", "withdraw", "--fence", "account-7", "--token", tok(300)});
  EXPECT_EQ(p.code, 65);
  EXPECT_NE(p.err.find("fence account-7"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("highest seen " + tok(400)), std::string::npos) << p.err;
  EXPECT_EQ(get("history").code, 66);
}

// A key written under two fence names: its own last token is a floor as
// well as each fence's. The older holder's fence L never saw token 100, yet
// the key must not go back to the value of token 50.
TEST_F(FencedStore, AKeysOwnLastTokenIsAFloorUnderAnyFenceName) {
  ASSERT_EQ(put("k", "new", tok(100)).code, 0);  // fence "k"
  auto p = run(dir_, {"put", "k", "old", "--token", tok(50), "--fence", "L"});
  EXPECT_EQ(p.code, 65);
  EXPECT_EQ(count_lines(p.err), 1u) << p.err;
  EXPECT_NE(p.err.find("stale"), std::string::npos) << p.err;
  EXPECT_NE(p.err.find("last written with " + tok(100)), std::string::npos) << p.err;
  EXPECT_EQ(get("k").out, "new\n");
  // Refused by the row, so fence L was not raised: another key under L
  // still takes token 50, and k takes a token at least its own.
  EXPECT_EQ(run(dir_, {"put", "j", "x", "--token", tok(50), "--fence", "L"}).code, 0);
  EXPECT_EQ(run(dir_, {"put", "k", "newer", "--token", tok(100), "--fence", "L"}).code, 0);
  EXPECT_EQ(get("k").out, "newer\n");
  // The other way round: L is now at 100, the key's default fence too.
  EXPECT_EQ(put("k", "older", tok(99)).code, 65);
  // A row from another ensemble is incomparable under any fence name.
  ASSERT_EQ(put("f", "theirs", tok(5, kOther)).code, 0);
  auto q = run(dir_, {"put", "f", "ours", "--token", tok(500), "--fence", "M"});
  EXPECT_EQ(q.code, 65);
  EXPECT_NE(q.err.find(kOther), std::string::npos) << q.err;
  EXPECT_EQ(get("f").out, "theirs\n");
}

TEST_F(FencedStore, UsageErrorsExit64) {
  const std::vector<std::vector<std::string>> bad{
      {},
      {"frobnicate"},
      {"put", "k", "v"},                           // no --token
      {"put", "k", "--token", tok(1)},             // no value
      {"put", "k", "v", "--token", "not-a-token"},  // malformed token
      {"put", "k", "v", "--token", kId + ":-1"},
      {"get"},
      {"get", "k", "--bogus"},
  };
  for (const auto& args : bad) {
    auto r = run(dir_, args);
    std::string shown;
    for (const auto& a : args) shown += a + " ";
    EXPECT_EQ(r.code, 64) << shown << r.err;
    EXPECT_FALSE(r.err.empty()) << shown;
    EXPECT_EQ(r.out, "") << shown;
  }
  EXPECT_FALSE(fs::exists(dir_ / "fenced-store.db")) << "a usage error touched the database";
}

TEST_F(FencedStore, HelpExits0) {
  auto r = run(dir_, {"--help"});
  EXPECT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("put"), std::string::npos);
  EXPECT_NE(r.out.find("65"), std::string::npos);
}

TEST_F(FencedStore, DatabasePathFromFlagEnvironmentOrDefault) {
  ASSERT_EQ(run(dir_, {"put", "k", "env", "--token", tok(1)}, {"FENCED_STORE_DB=env.db"}).code, 0);
  ASSERT_EQ(run(dir_, {"--db", "flag.db", "put", "k", "flag", "--token", tok(1)}, {"FENCED_STORE_DB=env.db"}).code, 0);
  EXPECT_TRUE(fs::exists(dir_ / "env.db"));
  EXPECT_TRUE(fs::exists(dir_ / "flag.db"));
  EXPECT_FALSE(fs::exists(dir_ / "fenced-store.db"));
  EXPECT_EQ(run(dir_, {"get", "k"}, {"FENCED_STORE_DB=env.db"}).out, "env\n");
  EXPECT_EQ(run(dir_, {"--db", "flag.db", "get", "k"}).out, "flag\n");
  EXPECT_EQ(get("k").code, 66);  // ./fenced-store.db has no such key
}

TEST_F(FencedStore, UnopenableDatabaseExits74) {
  auto r = run(dir_, {"--db", (dir_ / "no-such-dir" / "x.db").string(), "get", "k"});
  EXPECT_EQ(r.code, 74);
  EXPECT_EQ(count_lines(r.err), 1u) << r.err;
}

// Processes that are the first to open a new database switch it to WAL mode
// and create the table at the same moment; none may fail for it.
TEST_F(FencedStore, ConcurrentFirstUseOfANewDatabase) {
  constexpr int kRounds = 20;
  constexpr int kProcesses = 8;
  for (int round = 0; round < kRounds; ++round) {
    const std::string db = "fresh-" + std::to_string(round) + ".db";
    std::vector<Outcome> outcomes(kProcesses);
    std::vector<std::thread> pool;
    for (int i = 0; i < kProcesses; ++i) {
      pool.emplace_back([&, i] {
        outcomes[static_cast<std::size_t>(i)] =
            run(dir_, {"--db", db, "put", "k" + std::to_string(i), "v", "--token", tok(i)});
      });
    }
    for (auto& t : pool) t.join();
    for (const auto& o : outcomes) EXPECT_EQ(o.code, 0) << "round " << round << ": " << o.err;
    for (int i = 0; i < kProcesses; ++i) {
      EXPECT_EQ(run(dir_, {"--db", db, "get", "k" + std::to_string(i)}).out, "v\n");
    }
  }
}

// Several processes write one key at once with tokens drawn from a shared
// counter, some stepped back so they are stale on arrival; a further writer
// presents larger tokens from another ensemble. Each value is its own token
// text, so a get shows which write the row holds. Checked:
//   - after an accepted put returns, every later get shows a token >= it;
//   - no put is accepted below a token whose accepted put had already
//     returned before it started (a lower token never overwrites a higher);
//   - every foreign-source put is rejected;
//   - the final value is the largest token presented.
TEST_F(FencedStore, ConcurrentPutsNeverLetALowerTokenOverwriteAHigherOne) {
  ASSERT_EQ(put("hot", tok(1000), tok(1000)).code, 0);  // fixes the source

  struct Attempt {
    std::int64_t czxid;
    Clock::time_point start, end;
    int code;
  };
  constexpr int kLanes = 4;
  constexpr int kPerLane = 20;
  std::atomic<std::int64_t> counter{1001};
  std::mutex mu;
  std::vector<Attempt> attempts;
  std::atomic<int> regressions{0}, unexpected{0}, foreign_accepted{0};

  std::vector<std::thread> lanes;
  for (int lane = 0; lane < kLanes; ++lane) {
    lanes.emplace_back([&, lane] {
      std::mt19937 rng(static_cast<unsigned>(lane) + 17u);
      std::uniform_int_distribution<int> back(0, 3);
      for (int i = 0; i < kPerLane; ++i) {
        // Every fifth token is below the setup write's: certainly stale.
        const std::int64_t czxid = i % 5 == 4 ? 999 : counter.fetch_add(1) - back(rng);
        Attempt a{czxid, Clock::now(), {}, -1};
        a.code = put("hot", tok(czxid), tok(czxid)).code;
        a.end = Clock::now();
        {
          std::lock_guard lock(mu);
          attempts.push_back(a);
        }
        if (a.code == 0) {
          auto g = get("hot");
          auto seen = zklock::FencingToken::try_parse(g.out.substr(0, g.out.size() - 1));
          if (g.code != 0 || !seen || seen->czxid() < czxid) ++regressions;
        } else if (a.code != 65) {
          ++unexpected;
        }
      }
    });
  }
  lanes.emplace_back([&] {
    for (int i = 0; i < kPerLane / 2; ++i) {
      const auto t = tok(counter.load() + 1000000, kOther);
      const int code = put("hot", t, t).code;
      if (code == 0) ++foreign_accepted;
      if (code != 0 && code != 65) ++unexpected;
    }
  });
  for (auto& l : lanes) l.join();

  EXPECT_EQ(regressions.load(), 0);
  EXPECT_EQ(unexpected.load(), 0);
  EXPECT_EQ(foreign_accepted.load(), 0);
  ASSERT_EQ(attempts.size(), static_cast<std::size_t>(kLanes * kPerLane));

  int accepted = 0, rejected = 0, violations = 0;
  std::int64_t max_presented = 0;
  for (const auto& p : attempts) {
    max_presented = std::max(max_presented, p.czxid);
    if (p.code != 0) {
      ++rejected;
      continue;
    }
    ++accepted;
    for (const auto& q : attempts) {
      if (q.code == 0 && q.czxid > p.czxid && q.end < p.start) ++violations;
    }
  }
  EXPECT_EQ(violations, 0);
  EXPECT_GT(accepted, 0);
  EXPECT_GT(rejected, 0) << "no write was stale: the test did not exercise rejection";
  EXPECT_EQ(get("hot").out, tok(max_presented) + "\n");
}

}  // namespace
