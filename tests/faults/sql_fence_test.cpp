// docs/fencing.md's MySQL/MariaDB SQL, run against a real MariaDB server
// (Debian's mariadb-server, installed by scripts/install-deps): the test starts
// mariadbd on a loopback port with a temporary data directory and drives it
// with the `mariadb` client. Skipped, saying why, where the server cannot start.
//
// The stories: the fence per lock — one lock guards two keys (an account's
// balance and history); the successor raises the fence by writing one key; the
// former holder's stale write to the other key is refused — and the leases of
// one retained node, ordered by (czxid, lease ordinal), on a table first
// filled with plain tokens and migrated as documented.
#include <gtest/gtest.h>

#include <sys/stat.h>

#include "story_support.hpp"

namespace zklock::stories {
namespace {

using test::ChildProcess;
using test::SpawnOptions;

constexpr const char* kEnsemble = "0b6f6a52-4f0e-4c55-9d7e-3f1f2d9c1a10";
constexpr const char* kOtherEnsemble = "9d1e0c11-1111-4222-8333-444455556666";

// The SQL of docs/fencing.md, "MySQL / MariaDB (InnoDB)" (keep them the same).
constexpr const char* kSchema =
    "CREATE TABLE fences (name VARBINARY(255) PRIMARY KEY, fence BIGINT NOT NULL, lease BIGINT NOT NULL DEFAULT 0, "
    "source CHAR(36) NOT NULL) ENGINE = InnoDB;"
    "CREATE TABLE kv (k VARBINARY(255) PRIMARY KEY, v LONGBLOB NOT NULL) ENGINE = InnoDB;";
// A fences table from before lease ordinals, and its documented migration.
constexpr const char* kPlainSchema =
    "CREATE TABLE fences (name VARBINARY(255) PRIMARY KEY, fence BIGINT NOT NULL, source CHAR(36) NOT NULL) "
    "ENGINE = InnoDB;"
    "CREATE TABLE kv (k VARBINARY(255) PRIMARY KEY, v LONGBLOB NOT NULL) ENGINE = InnoDB;";
constexpr const char* kMigrate = "ALTER TABLE fences ADD COLUMN lease BIGINT NOT NULL DEFAULT 0 AFTER fence;";
constexpr const char* kPut =
    "START TRANSACTION;"
    "INSERT INTO fences (name, fence, lease, source) VALUES (@fence, @czxid, @lease, @ensemble) "
    "ON DUPLICATE KEY UPDATE "
    "  lease = IF((VALUES(fence), VALUES(lease)) >= (fence, lease) AND VALUES(source) = source, VALUES(lease), lease),"
    "  fence = IF((VALUES(fence), VALUES(lease)) >= (fence, lease) AND VALUES(source) = source, VALUES(fence), fence);"
    "INSERT INTO kv (k, v) SELECT @key, @value FROM fences "
    "  WHERE name = @fence AND fence = @czxid AND lease = @lease AND source = @ensemble FOR UPDATE "
    "ON DUPLICATE KEY UPDATE v = VALUES(v);"
    "SELECT fence = @czxid AND lease = @lease AND source = @ensemble AS applied, fence, source FROM fences "
    "  WHERE name = @fence FOR UPDATE;"
    "COMMIT;";

bool on_path(const std::string& name) {
  for (const char* dir : {"/usr/sbin/", "/usr/bin/", "/usr/local/bin/", "/usr/local/sbin/"}) {
    if (::access((std::string(dir) + name).c_str(), X_OK) == 0) return true;
  }
  return false;
}

class MariaDb {
 public:
  // Empty when it started; else why not.
  std::string start() {
    if (!on_path("mariadbd") || !on_path("mariadb-install-db") || !on_path("mariadb"))
      return "mariadbd, mariadb-install-db or mariadb not installed (scripts/install-deps installs mariadb-server)";
    data_ = dir_ / "data";
    socket_ = (dir_ / "sock").string();
    port_ = test::free_loopback_port();
    const auto install = test::run_to_exit(
        {.argv = {"mariadb-install-db", "--no-defaults", "--datadir=" + data_.string(), "--user=" + user(),
                  "--auth-root-authentication-method=normal", "--skip-test-db"}},
        120000ms);
    if (install.code != 0)
      return "mariadb-install-db failed (" + (install.timed_out ? std::string("timeout") : "exit " + std::to_string(install.code)) +
             "): " + tail(install.out + install.err);
    server_ = ChildProcess::spawn(SpawnOptions{
        .argv = {"mariadbd", "--no-defaults", "--datadir=" + data_.string(), "--socket=" + socket_,
                 "--port=" + std::to_string(port_), "--bind-address=127.0.0.1", "--user=" + user(),
                 "--skip-grant-tables", "--skip-log-bin", "--innodb-buffer-pool-size=32M",
                 "--pid-file=" + (dir_ / "mariadb.pid").string(), "--log-error=" + (dir_ / "error.log").string()},
        .output_file = dir_ / "server.out"});
    const auto deadline = test::Clock::now() + 60s;
    while (test::Clock::now() < deadline) {
      if (!server_.running()) return "mariadbd exited at start: " + tail(test::read_file(dir_ / "error.log"));
      auto [rc, out] = sql("SELECT 1");
      if (rc == 0) return {};
      std::this_thread::sleep_for(100ms);
    }
    return "mariadbd did not answer within 60 s: " + tail(test::read_file(dir_ / "error.log"));
  }
  ~MariaDb() {
    if (server_.pid() > 0) server_.terminate(10000ms);
  }

  // Runs `statements` over TCP on the loopback port; returns the exit code
  // and the output (tab-separated rows, no headers).
  std::pair<int, std::string> sql(const std::string& statements, const std::string& db = {}) {
    std::vector<std::string> argv = {"mariadb", "--no-defaults", "--protocol=TCP", "--host=127.0.0.1",
                                     "--port=" + std::to_string(port_), "-u", "root", "-N", "-B", "-e", statements};
    if (!db.empty()) argv.push_back(db);
    const auto r = test::run_to_exit({.argv = argv}, 30000ms);
    return {r.timed_out ? -1 : r.code, r.out + r.err};
  }

 private:
  static std::string user() {
    const char* u = std::getenv("USER");
    return ::geteuid() == 0 ? "root" : (u ? u : "nobody");
  }
  // The last 8 lines of `text`.
  static std::string tail(const std::string& text) {
    std::istringstream in(text);
    std::string line, out;
    std::vector<std::string> lines;
    while (std::getline(in, line)) lines.push_back(line);
    for (std::size_t i = lines.size() > 8 ? lines.size() - 8 : 0; i < lines.size(); ++i) out += lines[i] + "\n";
    return out;
  }

  TempDir dir_;
  std::filesystem::path data_;
  std::string socket_;
  int port_ = 0;
  ChildProcess server_;
};

std::string put(MariaDb& db, const std::string& fence, const std::string& key, const std::string& value,
                long long czxid, const std::string& ensemble = kEnsemble, long long lease = 0) {
  const std::string vars = "SET @fence = '" + fence + "', @key = '" + key + "', @value = '" + value +
                           "', @czxid = " + std::to_string(czxid) + ", @lease = " + std::to_string(lease) +
                           ", @ensemble = '" + ensemble + "';";
  auto [rc, out] = db.sql(vars + kPut, "fencing");
  EXPECT_EQ(rc, 0) << out;
  return out.substr(0, out.find('\t'));  // "1" applied, "0" refused
}

std::string value_of(MariaDb& db, const std::string& key) {
  auto [rc, out] = db.sql("SELECT v FROM kv WHERE k = '" + key + "'", "fencing");
  EXPECT_EQ(rc, 0) << out;
  while (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

TEST(SqlFence, MariaDbRunsTheDocumentedFencePerLock) {
  MariaDb db;
  if (auto why = db.start(); !why.empty()) GTEST_SKIP() << "MariaDB cannot start here: " << why;
  auto [rc, out] = db.sql(std::string("CREATE DATABASE fencing; USE fencing;") + kSchema);
  ASSERT_EQ(rc, 0) << out;

  // Holder A (token 300) writes both keys of account 7.
  EXPECT_EQ(put(db, "account-7", "balance", "100", 300), "1");
  EXPECT_EQ(put(db, "account-7", "history", "deposit-100", 300), "1");
  EXPECT_EQ(put(db, "account-7", "history", "deposit-100", 300), "1") << "the holder may write again";
  // Successor B (token 400) writes only the balance.
  EXPECT_EQ(put(db, "account-7", "balance", "50", 400), "1");
  // A, thawed, writes the key B never touched: refused by the shared fence.
  EXPECT_EQ(put(db, "account-7", "history", "withdraw-100", 300), "0");
  EXPECT_EQ(value_of(db, "history"), "deposit-100");
  // A token of another ensemble is refused even when larger.
  EXPECT_EQ(put(db, "account-7", "balance", "0", 999999, kOtherEnsemble), "0");
  EXPECT_EQ(value_of(db, "balance"), "50");
  // Another lock's fence is independent.
  EXPECT_EQ(put(db, "account-8", "balance-8", "5", 10), "1");
  auto [frc, fences] = db.sql("SELECT name, fence FROM fences ORDER BY name", "fencing");
  EXPECT_EQ(fences, "account-7\t400\naccount-8\t10\n");
}

// A retained node's leases: token 300 (its first grant, stored before lease
// ordinals existed), then its re-takes 300.1 and 300.2; a later node 301.
TEST(SqlFence, MariaDbOrdersTheLeasesOfANodeAndKeepsPlainTokens) {
  MariaDb db;
  if (auto why = db.start(); !why.empty()) GTEST_SKIP() << "MariaDB cannot start here: " << why;
  auto [rc, out] = db.sql(std::string("CREATE DATABASE fencing; USE fencing;") + kPlainSchema +
                          "INSERT INTO fences VALUES ('account-7', 300, '" + kEnsemble + "');" + kMigrate);
  ASSERT_EQ(rc, 0) << out;

  EXPECT_EQ(put(db, "account-7", "balance", "older-node", 299), "0");
  EXPECT_EQ(put(db, "account-7", "balance", "w1", 300), "1") << "the stored plain token is (300, 0)";
  EXPECT_EQ(put(db, "account-7", "balance", "w2", 300, kEnsemble, 1), "1") << "the re-take orders after it";
  EXPECT_EQ(put(db, "account-7", "history", "w1-late", 300), "0") << "the first lease, late";
  EXPECT_EQ(put(db, "account-7", "balance", "w3", 300, kEnsemble, 2), "1");
  EXPECT_EQ(put(db, "account-7", "balance", "w2-late", 300, kEnsemble, 1), "0");
  EXPECT_EQ(put(db, "account-7", "balance", "next-holder", 301), "1") << "a later node after every lease of 300";
  EXPECT_EQ(put(db, "account-7", "balance", "w4-late", 300, kEnsemble, 9), "0");
  EXPECT_EQ(value_of(db, "balance"), "next-holder");
  EXPECT_EQ(value_of(db, "history"), "");
  auto [frc, fences] = db.sql("SELECT name, fence, lease FROM fences", "fencing");
  EXPECT_EQ(fences, "account-7\t301\t0\n");
}

}  // namespace
}  // namespace zklock::stories
