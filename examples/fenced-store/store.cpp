#include "store.hpp"

#include <sqlite3.h>

#include <algorithm>
#include <chrono>
#include <memory>
#include <thread>

#include "zklock/error.hpp"

namespace fenced_store {
namespace {

using zklock::Errc;
using zklock::Error;

constexpr int kBusyTimeoutMs = 30000;

constexpr const char* kSchema =
    "CREATE TABLE IF NOT EXISTS kv ("
    "  key    TEXT PRIMARY KEY NOT NULL,"
    "  value  BLOB NOT NULL,"
    "  fence  INTEGER NOT NULL,"   // czxid of the token that wrote the row
    "  source TEXT NOT NULL,"      // ensemble id of that token
    "  lease  INTEGER NOT NULL DEFAULT 0"  // its lease ordinal
    ") WITHOUT ROWID";

// One fence per lock: every key the lock guards names the same fence, and all
// of them share its highest token.
constexpr const char* kFencesSchema =
    "CREATE TABLE IF NOT EXISTS fences ("
    "  name   TEXT PRIMARY KEY NOT NULL,"
    "  fence  INTEGER NOT NULL,"   // czxid of the highest token admitted
    "  source TEXT NOT NULL,"      // ensemble id of that token
    "  lease  INTEGER NOT NULL DEFAULT 0"  // its lease ordinal
    ") WITHOUT ROWID";

// A database written before lease ordinals existed lacks the column; its
// plain tokens are their node's first lease, ordinal 0 (the default), so
// they keep their place in the order (docs/protocol.md, "Fencing tokens").
constexpr const char* kHasLease[] = {
    "SELECT count(*) FROM pragma_table_info('kv') WHERE name = 'lease'",
    "SELECT count(*) FROM pragma_table_info('fences') WHERE name = 'lease'"};
constexpr const char* kAddLease[] = {"ALTER TABLE kv ADD COLUMN lease INTEGER NOT NULL DEFAULT 0",
                                     "ALTER TABLE fences ADD COLUMN lease INTEGER NOT NULL DEFAULT 0"};

// A database written before fences existed kept each key's token in its row:
// that row is the key's own fence (the default fence name is the key).
constexpr const char* kSeedFence =
    "INSERT OR IGNORE INTO fences (name, fence, lease, source) SELECT key, fence, lease, source FROM kv WHERE key = ?1";

// The check, and the raise of the fence, in one statement: 1 row changed
// when the token passes. Tokens order as the pair (czxid, lease ordinal).
constexpr const char* kRaiseFence =
    "INSERT INTO fences (name, fence, lease, source) VALUES (?1, ?2, ?3, ?4) "
    "ON CONFLICT (name) DO UPDATE SET fence = excluded.fence, lease = excluded.lease "
    "WHERE (excluded.fence, excluded.lease) >= (fences.fence, fences.lease) AND excluded.source = fences.source";

// Runs only after the fence passed, in the same transaction.
constexpr const char* kWrite =
    "INSERT INTO kv (key, value, fence, source, lease) VALUES (?1, ?2, ?3, ?4, ?5) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value, fence = excluded.fence, "
    "source = excluded.source, lease = excluded.lease";

constexpr const char* kFenceOf = "SELECT fence, source, lease FROM fences WHERE name = ?1";
// The key's own floor: the token that last wrote its row.
constexpr const char* kRowOf = "SELECT fence, source, lease FROM kv WHERE key = ?1";
constexpr const char* kGet = "SELECT value FROM kv WHERE key = ?1";

struct StmtDeleter {
  void operator()(sqlite3_stmt* s) const noexcept { sqlite3_finalize(s); }
};
using Stmt = std::unique_ptr<sqlite3_stmt, StmtDeleter>;

}  // namespace

FencedStore::FencedStore(const std::string& path) : path_(path) {
  const int rc = sqlite3_open_v2(path.c_str(), &db_,
                                 SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string msg = db_ ? sqlite3_errmsg(db_) : sqlite3_errstr(rc);
    sqlite3_close(db_);
    db_ = nullptr;
    throw Error(Errc::io_error, "cannot open database '" + path + "': " + msg);
  }
  try {
    sqlite3_busy_timeout(db_, kBusyTimeoutMs);
    enable_wal();
    exec("PRAGMA synchronous = FULL");
    // IMMEDIATE: take the write lock before reading the schema. In WAL mode a
    // read that upgrades to a write after another writer committed fails
    // at once (the busy handler cannot help), which a fresh database shared
    // by several new processes would hit.
    exec("BEGIN IMMEDIATE");
    try {
      exec(kSchema);
      exec(kFencesSchema);
      for (int t = 0; t < 2; ++t) {
        if (!count(kHasLease[t])) exec(kAddLease[t]);
      }
      exec("COMMIT");
    } catch (...) {
      sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
      throw;
    }
  } catch (...) {
    sqlite3_close(db_);
    db_ = nullptr;
    throw;
  }
}

FencedStore::~FencedStore() { sqlite3_close(db_); }

// WAL is a property of the file: only the first opener converts it. Two new
// processes converting at once both hold a shared lock and want an exclusive
// one; SQLite breaks that deadlock by failing one of them with SQLITE_BUSY
// without calling the busy handler. The loser retries after the winner is
// done, and then finds the file already in WAL mode.
void FencedStore::enable_wal() {
  constexpr int kAttempts = 400;  // with the backoff below: about 20 s at most
  for (int attempt = 1;; ++attempt) {
    std::string mode;
    char* err = nullptr;
    int rc = sqlite3_exec(
        db_, "PRAGMA journal_mode",
        [](void* out, int, char** values, char**) {
          if (values[0]) *static_cast<std::string*>(out) = values[0];
          return 0;
        },
        &mode, &err);
    sqlite3_free(err);
    if (rc == SQLITE_OK && mode == "wal") return;
    if (rc == SQLITE_OK) rc = sqlite3_exec(db_, "PRAGMA journal_mode = WAL", nullptr, nullptr, nullptr);
    if (rc == SQLITE_OK) return;
    if ((rc & 0xFF) != SQLITE_BUSY && (rc & 0xFF) != SQLITE_LOCKED) break;
    if (attempt == kAttempts) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(std::min(attempt, 50)));
  }
  throw Error(Errc::io_error, "database '" + path_ + "': cannot switch to WAL mode: " + sqlite3_errmsg(db_));
}

std::int64_t FencedStore::count(const char* sql) {
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db_, sql, -1, &raw, nullptr) != SQLITE_OK || sqlite3_step(raw) != SQLITE_ROW) {
    std::string msg = sqlite3_errmsg(db_);
    sqlite3_finalize(raw);
    throw Error(Errc::io_error, "database '" + path_ + "': " + msg + " (in: " + sql + ")");
  }
  const auto n = sqlite3_column_int64(raw, 0);
  sqlite3_finalize(raw);
  return n;
}

void FencedStore::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    throw Error(Errc::io_error, "database '" + path_ + "': " + msg + " (in: " + sql + ")");
  }
}

PutResult FencedStore::put(std::string_view key, std::string_view value,
                           const zklock::FencingToken& token, std::string_view fence) {
  if (fence.empty()) fence = key;
  auto fail = [&](const char* what) {
    return Error(Errc::io_error, "database '" + path_ + "': " + what + ": " + sqlite3_errmsg(db_));
  };
  auto prepare = [&](const char* sql, const char* what) {
    sqlite3_stmt* raw = nullptr;
    if (sqlite3_prepare_v2(db_, sql, -1, &raw, nullptr) != SQLITE_OK) throw fail(what);
    return Stmt(raw);
  };
  auto bind_text = [](const Stmt& s, int i, std::string_view t) {
    sqlite3_bind_text(s.get(), i, t.data(), static_cast<int>(t.size()), SQLITE_STATIC);
  };
  // The token in columns 0 (czxid), 1 (source) and 2 (lease ordinal) of a row read by `s`.
  auto token_of = [](const Stmt& s) {
    const auto* source = reinterpret_cast<const char*>(sqlite3_column_text(s.get(), 1));
    return zklock::FencingToken(source ? source : "", sqlite3_column_int64(s.get(), 0), 0,
                                sqlite3_column_int64(s.get(), 2));
  };
  auto refused = [&](zklock::FencingToken by_token, PutResult::Floor by) {
    PutResult r;
    r.by = by;
    r.verdict = by_token.ensemble_id() == token.ensemble_id() ? PutResult::Verdict::stale
                                                             : PutResult::Verdict::foreign_source;
    r.stored = std::move(by_token);
    return r;
  };
  // IMMEDIATE takes the write lock up front: the row's check, the fence's
  // check and raise, and the write are one step for every other writer of
  // this database.
  exec("BEGIN IMMEDIATE");
  try {
    {
      auto seed = prepare(kSeedFence, "prepare seed");
      bind_text(seed, 1, fence);
      if (sqlite3_step(seed.get()) != SQLITE_DONE) throw fail("seed fence");
    }
    {
      // The key's own floor first: a refused put raises no fence.
      auto row = prepare(kRowOf, "prepare row");
      bind_text(row, 1, key);
      const int rc = sqlite3_step(row.get());
      if (rc == SQLITE_ROW) {
        auto last = token_of(row);
        if (last.ensemble_id() != token.ensemble_id() || last > token) {
          row.reset();
          exec("COMMIT");  // the seed, if any
          return refused(std::move(last), PutResult::Floor::key);
        }
      } else if (rc != SQLITE_DONE) {
        throw fail("read row");
      }
    }
    auto raise = prepare(kRaiseFence, "prepare fence");
    bind_text(raise, 1, fence);
    sqlite3_bind_int64(raise.get(), 2, token.czxid());
    sqlite3_bind_int64(raise.get(), 3, token.ordinal());
    bind_text(raise, 4, token.ensemble_id());
    if (sqlite3_step(raise.get()) != SQLITE_DONE) throw fail("fence");
    PutResult result;
    if (sqlite3_changes(db_) == 1) {
      auto write = prepare(kWrite, "prepare put");
      bind_text(write, 1, key);
      sqlite3_bind_blob(write.get(), 2, value.data(), static_cast<int>(value.size()), SQLITE_STATIC);
      sqlite3_bind_int64(write.get(), 3, token.czxid());
      bind_text(write, 4, token.ensemble_id());
      sqlite3_bind_int64(write.get(), 5, token.ordinal());
      if (sqlite3_step(write.get()) != SQLITE_DONE) throw fail("put");
      result.stored = token;
    } else {
      auto read = prepare(kFenceOf, "prepare read");
      bind_text(read, 1, fence);
      if (sqlite3_step(read.get()) != SQLITE_ROW) throw fail("read fence after a rejected put");
      result = refused(token_of(read), PutResult::Floor::fence);
    }
    exec("COMMIT");
    return result;
  } catch (...) {
    sqlite3_exec(db_, "ROLLBACK", nullptr, nullptr, nullptr);
    throw;
  }
}

std::optional<std::string> FencedStore::get(std::string_view key) {
  sqlite3_stmt* raw = nullptr;
  if (sqlite3_prepare_v2(db_, kGet, -1, &raw, nullptr) != SQLITE_OK) {
    throw Error(Errc::io_error, "database '" + path_ + "': prepare get: " + sqlite3_errmsg(db_));
  }
  Stmt get(raw);
  sqlite3_bind_text(raw, 1, key.data(), static_cast<int>(key.size()), SQLITE_STATIC);
  const int rc = sqlite3_step(raw);
  if (rc == SQLITE_DONE) return std::nullopt;
  if (rc != SQLITE_ROW) {
    throw Error(Errc::io_error, "database '" + path_ + "': get: " + sqlite3_errmsg(db_));
  }
  const auto* data = static_cast<const char*>(sqlite3_column_blob(raw, 0));
  return std::string(data ? data : "", static_cast<std::size_t>(sqlite3_column_bytes(raw, 0)));
}

}  // namespace fenced_store
