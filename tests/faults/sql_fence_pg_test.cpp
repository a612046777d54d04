// docs/fencing.md's PostgreSQL SQL, run against a real PostgreSQL server
// (Debian's postgresql, installed by scripts/install-deps). PostgreSQL refuses
// to run as root, so initdb and the server run as `nobody` (runuser) in a
// temporary directory it owns, listening on a free loopback port; the test
// drives it with `psql`. Skipped, saying why, where the server cannot start.
//
// The documented statements run verbatim as prepared statements ($1..$5).
// Three stories: the fence per lock in sequence (a stale token refused, the
// current one accepted, a foreign one refused), the leases of one retained
// node ordered by (czxid, lease ordinal) on a table first filled with plain
// tokens and migrated as documented, and concurrent writers racing
// on one fence with interleaved tokens, judged by an audit trigger on kv (test
// instrumentation only) whose serial ids follow the fence row's lock order.
#include <gtest/gtest.h>

#include <pwd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <set>

#include "story_support.hpp"

namespace zklock::stories {
namespace {

constexpr const char* kEnsemble = "0b6f6a52-4f0e-4c55-9d7e-3f1f2d9c1a10";
constexpr const char* kOtherEnsemble = "9d1e0c11-1111-4222-8333-444455556666";

// The SQL of docs/fencing.md, "PostgreSQL" (keep them the same).
constexpr const char* kSchema =
    "CREATE TABLE fences (name text PRIMARY KEY, fence bigint NOT NULL, lease bigint NOT NULL DEFAULT 0,"
    " source uuid NOT NULL);"
    "CREATE TABLE kv (key text PRIMARY KEY, value bytea NOT NULL);";
// A fences table from before lease ordinals, and its documented migration.
constexpr const char* kPlainSchema =
    "CREATE TABLE fences (name text PRIMARY KEY, fence bigint NOT NULL, source uuid NOT NULL);"
    "CREATE TABLE kv (key text PRIMARY KEY, value bytea NOT NULL);";
constexpr const char* kMigrate = "ALTER TABLE fences ADD COLUMN lease bigint NOT NULL DEFAULT 0;";
constexpr const char* kPut =
    "WITH passed AS ("
    "  INSERT INTO fences AS cur (name, fence, lease, source) VALUES ($1, $2, $3, $4)"
    "  ON CONFLICT (name) DO UPDATE SET fence = EXCLUDED.fence, lease = EXCLUDED.lease"
    "    WHERE (EXCLUDED.fence, EXCLUDED.lease) >= (cur.fence, cur.lease) AND EXCLUDED.source = cur.source"
    "  RETURNING 1"
    ")"
    "INSERT INTO kv (key, value) SELECT $5, $6 FROM passed "
    "ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value";
// "Lock and check the fence first in the same transaction, then write."
constexpr const char* kCheckFence =
    "UPDATE fences SET fence = $2, lease = $3 WHERE name = $1 AND (fence, lease) <= ($2, $3) AND source = $4";

// Each session prepares the documented statements once.
std::string prepare() {
  return std::string("PREPARE put(text, bigint, bigint, uuid, text, bytea) AS ") + kPut + ";\n" +
         "PREPARE check_fence(text, bigint, bigint, uuid) AS " + kCheckFence + ";\n";
}

// A put with the token (czxid, lease): lease 0 is a node's first lease.
std::string put_sql(const std::string& fence, long long czxid, const std::string& ensemble, const std::string& key,
                    const std::string& value, long long lease = 0) {
  return "EXECUTE put('" + fence + "', " + std::to_string(czxid) + ", " + std::to_string(lease) + ", '" + ensemble +
         "', '" + key + "', '" + value + "');\n";
}

std::string check_fence_sql(const std::string& fence, long long czxid, long long lease) {
  return "BEGIN;\nEXECUTE check_fence('" + fence + "', " + std::to_string(czxid) + ", " + std::to_string(lease) +
         ", '" + kEnsemble + "');\nCOMMIT;\n";
}

// The newest installed server binaries (/usr/lib/postgresql/<major>/bin), or empty.
std::filesystem::path pg_bindir() {
  std::error_code ec;
  std::filesystem::path best;
  int best_major = -1;
  for (const auto& e : std::filesystem::directory_iterator("/usr/lib/postgresql", ec)) {
    const auto bin = e.path() / "bin";
    if (::access((bin / "postgres").c_str(), X_OK) != 0 || ::access((bin / "initdb").c_str(), X_OK) != 0) continue;
    const int major = std::atoi(e.path().filename().c_str());
    if (major > best_major) best_major = major, best = bin;
  }
  return best;
}

// The last 8 lines of `text`.
std::string tail(const std::string& text) {
  std::istringstream in(text);
  std::string line, out;
  std::vector<std::string> lines;
  while (std::getline(in, line)) lines.push_back(line);
  for (std::size_t i = lines.size() > 8 ? lines.size() - 8 : 0; i < lines.size(); ++i) out += lines[i] + "\n";
  return out;
}

class Postgres {
 public:
  // Empty when it started; else why not.
  std::string start() {
    const auto bin = pg_bindir();
    if (bin.empty()) return "no /usr/lib/postgresql/*/bin/postgres (scripts/install-deps installs postgresql)";
    if (::access("/usr/bin/psql", X_OK) != 0) return "psql not installed";
    // As root the server runs as `nobody`, in a directory it owns.
    std::vector<std::string> as_user;
    if (::geteuid() == 0) {
      const passwd* pw = ::getpwnam("nobody");
      if (!pw) return "tests run as root and there is no user `nobody` to run postgres as";
      if (::access("/usr/sbin/runuser", X_OK) != 0 && ::access("/sbin/runuser", X_OK) != 0)
        return "tests run as root and runuser is missing";
      if (::chown(dir_.path().c_str(), pw->pw_uid, pw->pw_gid) != 0) return "cannot chown the data dir to nobody";
      as_user = {"runuser", "-u", "nobody", "--"};
    }
    const auto data = dir_ / "data";
    port_ = test::free_loopback_port();
    auto argv = as_user;
    for (const auto& a : std::vector<std::string>{(bin / "initdb").string(), "--pgdata=" + data.string(),
                                                  "--username=zklock", "--auth=trust", "--encoding=UTF8",
                                                  "--no-instructions"}) {
      argv.push_back(a);
    }
    const auto init = test::run_to_exit({.argv = argv}, 120000ms);
    if (init.code != 0)
      return "initdb failed (" + (init.timed_out ? std::string("timeout") : "exit " + std::to_string(init.code)) +
             "): " + tail(init.out + init.err);
    argv = as_user;
    for (const auto& a : std::vector<std::string>{(bin / "postgres").string(), "-D", data.string(), "-p",
                                                  std::to_string(port_), "-c", "listen_addresses=127.0.0.1", "-c",
                                                  "unix_socket_directories=" + dir_.path().string(), "-c",
                                                  "shared_buffers=16MB", "-c", "max_connections=20"}) {
      argv.push_back(a);
    }
    server_ = ChildProcess::spawn(SpawnOptions{.argv = argv, .output_file = dir_ / "server.log"});
    const auto deadline = test::Clock::now() + 60s;
    while (test::Clock::now() < deadline) {
      if (!server_.running()) return "postgres exited at start: " + tail(test::read_file(dir_ / "server.log"));
      if (sql("SELECT 1;").first == 0) return {};
      std::this_thread::sleep_for(100ms);
    }
    return "postgres did not answer within 60 s: " + tail(test::read_file(dir_ / "server.log"));
  }
  ~Postgres() {
    if (server_.pid() > 0) server_.signal(SIGINT);  // fast shutdown
    if (server_.pid() > 0) server_.terminate(10000ms);
  }

  // A psql session over TCP on the loopback port running `script` (one
  // statement or meta-command a line), its output (command tags and
  // unaligned rows, no headers) in output(name).
  ChildProcess session(const std::string& script, const std::string& name) {
    auto options = psql(script, name);
    options.output_file = dir_ / (name + ".out");
    return ChildProcess::spawn(options);
  }
  std::string output(const std::string& name) { return test::read_file(dir_ / (name + ".out")); }

  // A psql session run to its end: its exit code and output.
  std::pair<int, std::string> sql(const std::string& script) {
    const auto r = test::run_to_exit(psql(script, "sql-" + std::to_string(++runs_)), 30000ms);
    return {r.timed_out ? -1 : r.code, r.out + r.err};
  }

 private:
  SpawnOptions psql(const std::string& script, const std::string& name) {
    const auto file = dir_ / (name + ".sql");
    std::ofstream(file) << script;
    ::chmod(file.c_str(), 0644);
    return {.argv = {"psql", "-X", "-h", "127.0.0.1", "-p", std::to_string(port_), "-U", "zklock", "-d", "postgres",
                     "-v", "ON_ERROR_STOP=1", "-A", "-t", "-f", file.string()},
            .env = {{"PGCONNECT_TIMEOUT", "5"}}};
  }

  TempDir dir_;
  int port_ = 0;
  int runs_ = 0;
  ChildProcess server_;
};

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (!line.empty()) out.push_back(line);
  }
  return out;
}

TEST(SqlFence, PostgresRunsTheDocumentedFencePerLock) {
  Postgres db;
  if (auto why = db.start(); !why.empty()) GTEST_SKIP() << "PostgreSQL cannot start here: " << why;
  auto [rc, out] = db.sql(kSchema);
  ASSERT_EQ(rc, 0) << out;

  // Holder A (token 300) writes both keys of account 7, twice with the same
  // token; successor B (token 400) writes only the balance; A, thawed, writes
  // the key B never touched: refused by the shared fence. A larger token of
  // another ensemble is refused; another lock's fence is independent.
  std::string script = prepare();
  script += put_sql("account-7", 300, kEnsemble, "balance", "100");
  script += put_sql("account-7", 300, kEnsemble, "history", "deposit-100");
  script += put_sql("account-7", 300, kEnsemble, "history", "deposit-100");
  script += put_sql("account-7", 400, kEnsemble, "balance", "50");
  script += put_sql("account-7", 300, kEnsemble, "history", "withdraw-100");
  script += put_sql("account-7", 999999, kOtherEnsemble, "balance", "0");
  script += put_sql("account-8", 10, kEnsemble, "balance-8", "5");
  // The lock-the-fence-first transaction: a stale token updates no row, the
  // current one (a repeat) updates one.
  script += check_fence_sql("account-7", 300, 0);
  script += check_fence_sql("account-7", 400, 0);
  script += "SELECT key || '=' || convert_from(value, 'UTF8') FROM kv ORDER BY key;\n";
  script += "SELECT name || '=' || fence FROM fences ORDER BY name;\n";
  std::tie(rc, out) = db.sql(script);
  ASSERT_EQ(rc, 0) << out;
  const std::vector<std::string> expected = {
      "PREPARE", "PREPARE",
      "INSERT 0 1", "INSERT 0 1", "INSERT 0 1",  // A: the holder may write again
      "INSERT 0 1",                              // B raises the fence
      "INSERT 0 0",                              // A's stale token
      "INSERT 0 0",                              // the foreign ensemble
      "INSERT 0 1",                              // another fence
      "BEGIN", "UPDATE 0", "COMMIT", "BEGIN", "UPDATE 1", "COMMIT",
      "balance=50", "balance-8=5", "history=deposit-100",
      "account-7=400", "account-8=10"};
  EXPECT_EQ(lines_of(out), expected) << out;
}

// A retained node's leases: token 300 (its first grant, stored before lease
// ordinals existed, in a table migrated as documented), then its re-takes
// 300.1 and 300.2; a later node 301. Each later lease orders after the
// earlier ones, in both documented statements.
TEST(SqlFence, PostgresOrdersTheLeasesOfANodeAndKeepsPlainTokens) {
  Postgres db;
  if (auto why = db.start(); !why.empty()) GTEST_SKIP() << "PostgreSQL cannot start here: " << why;
  auto [rc, out] = db.sql(std::string(kPlainSchema) + "INSERT INTO fences VALUES ('account-7', 300, '" + kEnsemble +
                          "');\n" + kMigrate);
  ASSERT_EQ(rc, 0) << out;
  std::string script = prepare();
  script += put_sql("account-7", 299, kEnsemble, "balance", "older-node");
  script += put_sql("account-7", 300, kEnsemble, "balance", "w1");        // the stored lease, again
  script += put_sql("account-7", 300, kEnsemble, "balance", "w2", 1);     // the re-take
  script += put_sql("account-7", 300, kEnsemble, "history", "w1-late");   // the first lease, late
  script += put_sql("account-7", 300, kEnsemble, "balance", "w3", 2);
  script += put_sql("account-7", 300, kEnsemble, "balance", "w2-late", 1);
  script += check_fence_sql("account-7", 300, 1);
  script += check_fence_sql("account-7", 300, 2);
  script += put_sql("account-7", 301, kEnsemble, "balance", "next-holder");  // a later node
  script += put_sql("account-7", 300, kEnsemble, "balance", "w4-late", 9);
  script += "SELECT key || '=' || convert_from(value, 'UTF8') FROM kv ORDER BY key;\n";
  script += "SELECT name || '=' || fence || '.' || lease FROM fences ORDER BY name;\n";
  std::tie(rc, out) = db.sql(script);
  ASSERT_EQ(rc, 0) << out;
  const std::vector<std::string> expected = {
      "PREPARE", "PREPARE",
      "INSERT 0 0",  // an older node
      "INSERT 0 1",  // the stored plain token is (300, 0): it may write again
      "INSERT 0 1",  // (300, 1) orders after it
      "INSERT 0 0",  // (300, 0) after (300, 1): refused
      "INSERT 0 1",  // (300, 2)
      "INSERT 0 0",  // (300, 1) after (300, 2)
      "BEGIN", "UPDATE 0", "COMMIT", "BEGIN", "UPDATE 1", "COMMIT",
      "INSERT 0 1",  // 301 after every lease of 300
      "INSERT 0 0",  // (300, 9) after 301
      "balance=next-holder", "account-7=301.0"};
  EXPECT_EQ(lines_of(out), expected) << out;
}

// Writers in parallel sessions present interleaved, partly stale tokens for
// one fence guarding two keys. The fence row's lock orders the puts: the
// audit's serial ids are taken under it, so the accepted writes, in id order,
// must carry non-decreasing tokens, every put refused must be absent from
// the audit, and the fence ends at the largest token presented.
TEST(SqlFence, PostgresConcurrentWritersNeverLetAStaleTokenIn) {
  Postgres db;
  if (auto why = db.start(); !why.empty()) GTEST_SKIP() << "PostgreSQL cannot start here: " << why;
  auto [rc, out] = db.sql(std::string(kSchema) +
                          "CREATE TABLE audit (id bigserial PRIMARY KEY, key text NOT NULL, value bytea NOT NULL);\n"
                          "CREATE FUNCTION audit_kv() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN "
                          "INSERT INTO audit (key, value) VALUES (NEW.key, NEW.value); RETURN NEW; END $$;\n"
                          "CREATE TRIGGER kv_audit AFTER INSERT OR UPDATE ON kv FOR EACH ROW "
                          "EXECUTE FUNCTION audit_kv();\n"
                          "CREATE TABLE ready (writer int PRIMARY KEY); CREATE TABLE go (x int);\n");
  ASSERT_EQ(rc, 0) << out;

  constexpr int kWriters = 4, kPuts = 80;
  // Writer w's i-th token: rising by 10 a round with a per-writer jitter of
  // up to 24, so the writers overtake each other and many tokens arrive stale.
  auto token = [](int w, int i) { return 1000 + 10LL * i + (w * 37 + i * 13) % 25; };
  long long max_token = 0;
  std::vector<ChildProcess> sessions;
  for (int w = 0; w < kWriters; ++w) {
    // A start line: each session says it is ready, then waits (bounded)
    // for the go, so the puts of all writers overlap.
    std::string script = prepare() + "INSERT INTO ready VALUES (" + std::to_string(w) + ");\n" +
                         "DO $$ BEGIN FOR i IN 1..6000 LOOP EXIT WHEN EXISTS (SELECT 1 FROM go); "
                         "PERFORM pg_sleep(0.005); END LOOP; END $$;\n";
    for (int i = 0; i < kPuts; ++i) {
      const auto t = token(w, i);
      max_token = std::max(max_token, t);
      const auto label = "w" + std::to_string(w) + "-" + std::to_string(i) + "-t" + std::to_string(t);
      script += "\\echo " + label + "\n";
      script += put_sql("account-7", t, kEnsemble, i % 2 ? "history" : "balance", label);
    }
    sessions.push_back(db.session(script, "writer-" + std::to_string(w)));
  }
  const auto deadline = test::Clock::now() + 30s;
  for (;;) {
    std::tie(rc, out) = db.sql("SELECT count(*) FROM ready;");
    ASSERT_EQ(rc, 0) << out;
    if (lines_of(out) == std::vector<std::string>{std::to_string(kWriters)}) break;
    ASSERT_LT(test::Clock::now(), deadline) << "the writers did not all connect: " << out;
    std::this_thread::sleep_for(20ms);
  }
  std::tie(rc, out) = db.sql("INSERT INTO go VALUES (1);");
  ASSERT_EQ(rc, 0) << out;
  std::set<std::string> accepted, refused;
  for (int w = 0; w < kWriters; ++w) {
    auto st = sessions[w].wait_exit(120000ms);
    const auto text = db.output("writer-" + std::to_string(w));
    ASSERT_TRUE(st && st->exited() && st->exit_code() == 0) << "writer " << w << ": " << text;
    const auto lines = lines_of(text);
    // PREPARE, PREPARE, INSERT 0 1 (ready), DO; then a label and a tag a put.
    ASSERT_EQ(lines.size(), 4u + 2u * kPuts) << text;
    for (std::size_t i = 4; i + 1 < lines.size(); i += 2) {
      if (lines[i + 1] == "INSERT 0 1") {
        accepted.insert(lines[i]);
      } else {
        ASSERT_EQ(lines[i + 1], "INSERT 0 0") << lines[i];
        refused.insert(lines[i]);
      }
    }
  }
  std::tie(rc, out) = db.sql(
      "SELECT convert_from(value, 'UTF8') FROM audit ORDER BY id;\n"
      "SELECT 'fence=' || fence FROM fences WHERE name = 'account-7';\n");
  ASSERT_EQ(rc, 0) << out;
  auto rows = lines_of(out);
  ASSERT_FALSE(rows.empty());
  EXPECT_EQ(rows.back(), "fence=" + std::to_string(max_token));
  rows.pop_back();

  long long last = 0;
  std::set<std::string> audited;
  int switches = 0;  // consecutive accepted puts by different writers: evidence the sessions overlapped
  for (std::size_t r = 1; r < rows.size(); ++r) switches += rows[r].substr(0, 2) != rows[r - 1].substr(0, 2);
  for (const auto& row : rows) {
    const auto t = std::stoll(row.substr(row.rfind("-t") + 2));
    EXPECT_GE(t, last) << "accepted out of token order: " << row << " after token " << last;
    last = std::max(last, t);
    audited.insert(row);
  }
  EXPECT_EQ(audited, accepted) << "the audit must hold exactly the puts psql saw accepted";
  EXPECT_EQ(rows.size(), accepted.size()) << "each accepted put writes one row once";
  EXPECT_GT(accepted.size(), 0u);
  EXPECT_GT(refused.size(), 0u) << "the tokens were meant to arrive stale now and then";
  report("postgres: %d writers x %d puts on one fence: %zu accepted (%d changes of writer), %zu refused as stale, "
         "fence %lld", kWriters, kPuts, accepted.size(), switches, refused.size(), max_token);
}

}  // namespace
}  // namespace zklock::stories
