// fenced-store and lease ordinals (docs/fencing.md, "The token"): the real
// binary orders tokens as (czxid, lease ordinal), and a database written
// before ordinals existed, holding plain tokens, keeps working: its tokens
// are their node's first lease.
#include <gtest/gtest.h>

#include <sqlite3.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include "child_process.hpp"
#include "harness_base.hpp"

#ifndef FENCED_STORE_BIN
#error "FENCED_STORE_BIN must name the fenced-store executable"
#endif

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string kId = "0b6f6a52-4f0e-4c55-9d7e-3f1f2d9c1a10";

std::string tok(const std::string& czxid_and_ordinal) { return kId + ":" + czxid_and_ordinal; }

class FencedStoreLease : public ::testing::Test {
 protected:
  // fenced-store with `args` on the test's database (bounded: 60 s).
  zklock::test::RunResult run(const std::vector<std::string>& args) {
    zklock::test::SpawnOptions o;
    o.argv = {FENCED_STORE_BIN, "--db", db_.string()};
    o.argv.insert(o.argv.end(), args.begin(), args.end());
    o.env_drop_prefixes = {"FENCED_STORE_DB"};
    return zklock::test::run_to_exit(std::move(o), 60s);
  }
  int put(const std::string& key, const std::string& value, const std::string& token,
          const std::string& fence = "acct") {
    return run({"put", key, value, "--token", token, "--fence", fence}).code;
  }
  std::string get(const std::string& key) { return run({"get", key}).out; }

  zklock::test::TempDir tmp_{"zklock-fenced-store-lease-"};
  fs::path db_ = tmp_.path() / "store.db";
};

// A retained node's re-takes: the same czxid, ordinals 1, 2, ... Each later
// lease orders after the earlier ones; a later node after all of them.
TEST_F(FencedStoreLease, ALaterLeaseOfANodeOrdersAfterItsEarlierLeasesAndAnotherHolderAfterAll) {
  ASSERT_EQ(put("balance", "w2", tok("300.1")), 0) << "the node's first re-take";
  EXPECT_EQ(put("balance", "w1-late", tok("300")), 65) << "the node's first lease, written late";
  EXPECT_EQ(put("history", "w1-late", tok("300")), 65) << "the fence, not only the key, refuses it";
  EXPECT_EQ(put("balance", "w2-again", tok("300.1")), 0) << "a lease may write again";
  EXPECT_EQ(put("balance", "w3", tok("300.2")), 0);
  EXPECT_EQ(put("balance", "w2-late", tok("300.1")), 65);
  EXPECT_EQ(put("balance", "next-holder", tok("301")), 0) << "a later node orders after every lease of 300";
  EXPECT_EQ(put("balance", "w4-late", tok("300.9")), 65);
  EXPECT_EQ(get("balance"), "next-holder\n");
  EXPECT_EQ(run({"put", "k", "v", "--token", tok("300.0")}).code, 64) << "ordinal 0 has one spelling: none";
}

// A database from before ordinals: no `lease` column, plain tokens. Its
// rows and fences read as ordinal 0, the first lease of their node.
TEST_F(FencedStoreLease, ADatabaseOfPlainTokensKeepsWorking) {
  {
    sqlite3* db = nullptr;
    ASSERT_EQ(sqlite3_open(db_.c_str(), &db), SQLITE_OK);
    const std::string sql =
        "CREATE TABLE kv (key TEXT PRIMARY KEY NOT NULL, value BLOB NOT NULL, fence INTEGER NOT NULL,"
        " source TEXT NOT NULL) WITHOUT ROWID;"
        "CREATE TABLE fences (name TEXT PRIMARY KEY NOT NULL, fence INTEGER NOT NULL, source TEXT NOT NULL)"
        " WITHOUT ROWID;"
        "INSERT INTO kv VALUES ('balance', 'old', 300, '" + kId + "');"
        "INSERT INTO fences VALUES ('acct', 300, '" + kId + "');";
    char* err = nullptr;
    EXPECT_EQ(sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &err), SQLITE_OK) << (err ? err : "");
    sqlite3_free(err);
    sqlite3_close(db);
  }
  EXPECT_EQ(put("balance", "stale", tok("299")), 65);
  EXPECT_EQ(put("balance", "again", tok("300")), 0) << "the stored lease may write again";
  EXPECT_EQ(put("balance", "re-take", tok("300.1")), 0) << "its node's next lease orders after it";
  EXPECT_EQ(put("balance", "late", tok("300")), 65) << "and refuses the stored lease from then on";
  EXPECT_EQ(get("balance"), "re-take\n");
}

}  // namespace
