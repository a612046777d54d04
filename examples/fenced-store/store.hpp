// FencedStore: a key-value table in SQLite that enforces fencing tokens itself.
//
// The fence belongs to what the lock protects, not to one key: every put
// names a fence (by default its key), and all keys that name the same fence
// share one highest token, kept in the `fences` table. A put checks and
// raises its fence and writes its key in one IMMEDIATE transaction, so no
// other writer comes between the check and the write:
//
//   INSERT INTO fences (name, fence, lease, source) VALUES (?1, ?2, ?3, ?4)
//   ON CONFLICT (name) DO UPDATE SET fence = excluded.fence, lease = excluded.lease
//     WHERE (excluded.fence, excluded.lease) >= (fences.fence, fences.lease)
//       AND excluded.source = fences.source;
//   -- 1 row changed: the token passed; then
//   INSERT INTO kv ... ON CONFLICT (key) DO UPDATE SET value = ..., fence = ..., lease = ..., source = ...
//
// A new fence takes any token, and that first accepted write fixes its
// source. Later writes need the same source and a token (czxid, lease
// ordinal) at least the fence's (equal: the same lease writing again; a
// re-take of a retained node has the same czxid and a larger ordinal).
// Why per lock: when one lock guards an account's balance and its history,
// a paused former holder must not write the history after the new holder
// wrote only the balance.
//
// Each kv row records the token that wrote it, and that token is a floor
// too: the row is checked first, in the same transaction. A key written
// under two fence names (a lock renamed, a key moved to another lock, a
// caller that sometimes omits --fence) must not go back to an older value
// because the other fence never saw the newer token.
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
  // What refused a put: the key's own row, or the fence.
  enum class Floor { key, fence };
  Verdict verdict = Verdict::accepted;
  Floor by = Floor::fence;  // rejections only
  // The presented token when accepted; the one that caused the rejection
  // (the row's or the fence's, as `by` says) otherwise.
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

  // Writes value under key if the token passes the key's own row and
  // `fence` (empty: the key itself), raising the fence (see above). On a
  // rejection, `stored` is the token that refused it. Throws
  // zklock::Error(io_error) on a database failure.
  PutResult put(std::string_view key, std::string_view value, const zklock::FencingToken& token,
                std::string_view fence = {});
  // The key's value, or nullopt when there is no such key.
  std::optional<std::string> get(std::string_view key);

 private:
  void enable_wal();
  void exec(const char* sql);
  std::int64_t count(const char* sql);  // the first column of a one-row query
  sqlite3* db_ = nullptr;
  std::string path_;
};

}  // namespace fenced_store
