// FencedStore: a key-value table in SQLite that enforces fencing tokens itself.
//
// Each row remembers the token of the write that produced it: `fence` (the
// czxid) and `source` (the ensemble id). A put is one conditional statement,
// so the check and the write cannot be separated by another writer:
//
//   INSERT INTO kv (key, value, fence, source) VALUES (?1, ?2, ?3, ?4)
//   ON CONFLICT (key) DO UPDATE SET value = excluded.value, fence = excluded.fence
//     WHERE excluded.fence >= kv.fence AND excluded.source = kv.source
//
// A new key takes any token, and that first accepted write fixes the key's
// source. Later writes need the same source and a fence at least the stored
// one (equal: the same holder writing again). Whether the row changed
// (sqlite3_changes) is the verdict.
//
// Several processes may use one database file at once: WAL mode, a busy
// timeout, and BEGIN IMMEDIATE around each put. synchronous=FULL, because a
// fence lost to a power cut would let a stale holder write again.
//
// Thread-safety: one FencedStore per thread (it owns one SQLite connection).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "zklock/token.hpp"

struct sqlite3;

namespace fenced_store {

struct PutResult {
  enum class Verdict { accepted, stale, foreign_source };
  Verdict verdict = Verdict::accepted;
  // The key's token after the put: the presented one when accepted, the one
  // that caused the rejection otherwise.
  zklock::FencingToken stored;
  explicit operator bool() const noexcept { return verdict == Verdict::accepted; }
};

class FencedStore {
 public:
  // Opens (creating if needed) the database at `path`. Throws
  // zklock::Error(io_error) with SQLite's message on failure.
  explicit FencedStore(const std::string& path);
  ~FencedStore();
  FencedStore(const FencedStore&) = delete;
  FencedStore& operator=(const FencedStore&) = delete;

  // Writes value under key if the token passes the fence (see above).
  // Throws zklock::Error(io_error) on a database failure.
  PutResult put(std::string_view key, std::string_view value, const zklock::FencingToken& token);
  // The key's value, or nullopt when there is no such key.
  std::optional<std::string> get(std::string_view key);

 private:
  void enable_wal();
  void exec(const char* sql);
  sqlite3* db_ = nullptr;
  std::string path_;
};

}  // namespace fenced_store
