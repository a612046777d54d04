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
    "  source TEXT NOT NULL"       // ensemble id of that token
    ") WITHOUT ROWID";

// The whole enforcement: one statement, atomic in SQLite.
constexpr const char* kPut =
    "INSERT INTO kv (key, value, fence, source) VALUES (?1, ?2, ?3, ?4) "
    "ON CONFLICT (key) DO UPDATE SET value = excluded.value, fence = excluded.fence "
    "WHERE excluded.fence >= kv.fence AND excluded.source = kv.source";

constexpr const char* kFenceOf = "SELECT fence, source FROM kv WHERE key = ?1";
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

void FencedStore::exec(const char* sql) {
  char* err = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &err) != SQLITE_OK) {
    std::string msg = err ? err : sqlite3_errmsg(db_);
    sqlite3_free(err);
    throw Error(Errc::io_error, "database '" + path_ + "': " + msg + " (in: " + sql + ")");
  }
}

PutResult FencedStore::put(std::string_view key, std::string_view value,
                           const zklock::FencingToken& token) {
  auto fail = [&](const char* what) {
    return Error(Errc::io_error, "database '" + path_ + "': " + what + ": " + sqlite3_errmsg(db_));
  };
  // IMMEDIATE takes the write lock up front, so the rejection we report is
  // the one our statement saw (no writer can slip in before the SELECT).
  exec("BEGIN IMMEDIATE");
  try {
    sqlite3_stmt* raw = nullptr;
    if (sqlite3_prepare_v2(db_, kPut, -1, &raw, nullptr) != SQLITE_OK) throw fail("prepare put");
    Stmt put(raw);
    sqlite3_bind_text(raw, 1, key.data(), static_cast<int>(key.size()), SQLITE_STATIC);
    sqlite3_bind_blob(raw, 2, value.data(), static_cast<int>(value.size()), SQLITE_STATIC);
    sqlite3_bind_int64(raw, 3, token.czxid());
    sqlite3_bind_text(raw, 4, token.ensemble_id().data(), static_cast<int>(token.ensemble_id().size()),
                      SQLITE_STATIC);
    if (sqlite3_step(raw) != SQLITE_DONE) throw fail("put");
    PutResult result;
    if (sqlite3_changes(db_) == 1) {
      result.stored = token;
    } else {
      if (sqlite3_prepare_v2(db_, kFenceOf, -1, &raw, nullptr) != SQLITE_OK) throw fail("prepare read");
      Stmt read(raw);
      sqlite3_bind_text(raw, 1, key.data(), static_cast<int>(key.size()), SQLITE_STATIC);
      if (sqlite3_step(raw) != SQLITE_ROW) throw fail("read fence after a rejected put");
      const auto* source = reinterpret_cast<const char*>(sqlite3_column_text(raw, 1));
      result.stored = zklock::FencingToken(source ? source : "", sqlite3_column_int64(raw, 0));
      result.verdict = result.stored.ensemble_id() == token.ensemble_id()
                           ? PutResult::Verdict::stale
                           : PutResult::Verdict::foreign_source;
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
