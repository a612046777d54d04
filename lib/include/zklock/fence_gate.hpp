// FenceGate: fencing-token enforcement for a service that is itself the
// protected resource (see docs/fencing.md).
//
// A lock only keeps writers apart while every holder is running. A holder that
// is paused past its session timeout resumes still believing it holds the
// lock; the only thing that can stop its write is the resource checking the
// token that came with the lock. FenceGate is that check for a service of your
// own: call admit() on every write, and apply the write only when it says so.
//
// Per fence (any non-empty name the service chooses), the gate remembers the
// highest token it has admitted, the "mark". A fence is what one lock
// protects: when a lock guards several items (an account's balance and its
// history), admit every write to any of them under the same fence name, so a
// paused former holder is refused even on the items the new holder has not
// written yet. (The parameter is called `resource` below: it is the fence.)
// admit() then decides, atomically with respect to every other admit(),
// ordering tokens of one ensemble as the pair (czxid, lease ordinal)
// (zklock/token.hpp; a token without an ordinal has ordinal 0):
//   - no mark yet:                       admitted; the token becomes the mark
//                                        and fixes the resource's source ensemble
//   - same ensemble, token >= the mark:  admitted; the mark rises to it (the
//                                        holder may write any number of times)
//   - same ensemble, token <  the mark:  rejected, Verdict::stale (an earlier
//                                        holder, or an earlier lease of the
//                                        same retained node)
//   - another ensemble:                  rejected, Verdict::foreign_source, even
//                                        when its czxid is larger: czxids of two
//                                        ensembles are unrelated counters
//   - token text that does not parse,
//     or an empty token:                 rejected, Verdict::malformed
// Every rejection is counted and logged at warn: it means a client kept
// writing after losing its lock (it was paused, or it has a bug), or is
// talking to the wrong ZooKeeper. An operator must see it.
//
// Admitting is not applying. The gate guarantees the order of admits; the
// caller must make "admit then apply" atomic with respect to other writes to
// the same resource (apply under the same per-resource lock, or apply in a
// store that checks the token itself, like examples/fenced-store).
//
// Durability. By default the marks live in memory and a restart forgets them:
// after a restart, a paused old holder's write would be admitted. With
// FenceGateOptions::state_file set, the marks are kept in that file, replaced
// atomically (write a temporary file, fsync, rename, fsync the directory):
//   - Persist::every_raise (the default): a token that raises a mark is
//     written to disk before it is admitted. Safe across crashes. Costs one
//     file rewrite + two fsyncs per raise; raises are serialized with each
//     other (repeat writes with the current token and rejections are not).
//     A lock changes hands rarely, so raises are rare next to writes.
//   - Persist::on_flush: raises are admitted at memory speed and written only
//     by flush() and the destructor. A crash forgets every raise since the
//     last flush, and a stale holder's token may then be admitted. Use it only
//     where that window is acceptable, and say so.
// A state file that is truncated, corrupted or of an unknown version is
// refused with an Error naming the file; the gate never silently starts from
// zero over a damaged file. A missing file means "first start" unless
// FenceGateOptions::require_state_file is set. One gate owns a state file at a
// time (enforced with an flock on "<state_file>.lock").
//
// State file format, version 1 (text, one entry per line):
//   zklock-fence-state 1 entries=<N> bytes=<body length> crc32=<8 hex digits>\n
//   <token> <resource, percent-encoded>\n      (N times: the body)
// <token> is the token's text form (docs/protocol.md, "Fencing tokens"):
// "<ensemble-id>:<czxid>", or "<ensemble-id>:<czxid>.<ordinal>" for a
// re-take's lease. A file written before ordinals existed reads as it is;
// a build from before then refuses a file holding an ordinal (malformed).
// The CRC-32 (IEEE) covers the body; bytes catches truncation at a line end.
//
// Thread-safety: all methods may be called concurrently. Resources are spread
// over independently locked shards, so admits for different resources rarely
// contend.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>

#include "zklock/token.hpp"

namespace spdlog {
class logger;
}

namespace zklock {

namespace detail {
// An open file descriptor, closed exactly once (by reset() or the
// destructor; fence_gate.cpp). Move-only; -1 holds nothing.
class UniqueFd {
 public:
  UniqueFd() noexcept = default;
  explicit UniqueFd(int fd) noexcept : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  ~UniqueFd() { reset(); }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;

  int get() const noexcept { return fd_; }
  // Closes the descriptor, if any; errors are ignored (nothing was written through it).
  void reset() noexcept;

 private:
  int fd_ = -1;
};
}  // namespace detail

struct AdmitResult {
  enum class Verdict { admitted, stale, foreign_source, malformed };

  Verdict verdict = Verdict::malformed;
  // The token as presented; empty when the text did not parse.
  FencingToken presented;
  // The resource's mark after this call: for an admit, the presented token;
  // for a rejection, the mark that caused it (empty when there was none,
  // which only happens for malformed tokens).
  FencingToken highest;
  // True when this admit created or raised the mark (and, in durable mode,
  // the new mark is on disk).
  bool raised = false;

  explicit operator bool() const noexcept { return verdict == Verdict::admitted; }
  // One line for a log or an error reply, e.g.
  // "stale token <t>: highest seen <t2>". Says "admitted" for an admit.
  std::string reason() const;
};

// "admitted", "stale", "foreign_source", "malformed".
std::string_view verdict_name(AdmitResult::Verdict verdict) noexcept;

enum class Persist {
  every_raise,  // a raise is on disk before it is admitted (crash-safe)
  on_flush,     // a raise is on disk after the next flush() (a crash forgets it)
};

struct FenceGateOptions {
  // Empty: marks are kept in memory only and a restart forgets them.
  std::filesystem::path state_file;
  Persist persist = Persist::every_raise;
  // Refuse to start when state_file does not exist (for a service that has
  // run before: a missing file then means lost state, not a first start).
  bool require_state_file = false;
  // spdlog logger for rejections and persistence errors; empty, or a name
  // spdlog::get() does not know, means the default logger.
  std::string logger_name;
};

struct RejectionCounts {
  std::uint64_t stale = 0;
  std::uint64_t foreign_source = 0;
  std::uint64_t malformed = 0;
  std::uint64_t total() const noexcept { return stale + foreign_source + malformed; }
};

class FenceGate {
 public:
  // Loads options.state_file when set. Throws Error: io_error when the file
  // cannot be read, is required but missing, or is owned by another gate;
  // protocol_error when its content is truncated, corrupted or of an unknown
  // version (the message names the file and what is wrong).
  explicit FenceGate(FenceGateOptions options = {});
  // With Persist::on_flush, flushes; a failure is logged, never thrown.
  ~FenceGate();
  FenceGate(const FenceGate&) = delete;
  FenceGate& operator=(const FenceGate&) = delete;

  // Decides whether a write to `resource` carrying `token` may proceed (see
  // the table at the top). REQUIRES: resource is not empty (else throws
  // Error(invalid_argument)). In Persist::every_raise mode a raise that cannot
  // be written throws Error(io_error); the token is then not admitted and the
  // mark is unchanged.
  AdmitResult admit(std::string_view resource, const FencingToken& token);
  // As above for the token's text form (FencingToken::parse); text that does
  // not parse is rejected as Verdict::malformed (not thrown).
  AdmitResult admit(std::string_view resource, std::string_view token_text);

  // The resource's mark, or nullopt when no token was ever admitted for it.
  std::optional<FencingToken> highest(std::string_view resource) const;
  // Rejections since construction, by verdict.
  RejectionCounts rejections() const noexcept;
  // Admits since construction.
  std::uint64_t admitted() const noexcept;

  // Writes every mark to the state file now. A no-op without a state file.
  // Throws Error(io_error) when the file cannot be written.
  void flush();

 private:
  struct Hash {
    using is_transparent = void;
    std::size_t operator()(std::string_view s) const noexcept {
      return std::hash<std::string_view>{}(s);
    }
  };
  using MarkMap = std::unordered_map<std::string, FencingToken, Hash, std::equal_to<>>;
  struct alignas(64) Shard {
    mutable std::mutex mu;
    MarkMap marks;  // GUARDED_BY(mu)
  };
  static constexpr std::size_t kShards = 64;

  Shard& shard_for(std::string_view resource) const noexcept;
  // Decides against the current mark; on a raise in memory mode (or when
  // `apply_raise`), stores the new mark. REQUIRES: shard.mu held.
  AdmitResult decide(MarkMap& marks, std::string_view resource, const FencingToken& token,
                     bool apply_raise) const;
  AdmitResult admit_durable_raise(std::string_view resource, const FencingToken& token);
  AdmitResult finish(std::string_view resource, AdmitResult result);
  void log_rejection(std::string_view resource, const AdmitResult& result,
                     std::string_view presented_text) const;
  void write_state_locked();  // REQUIRES: persist_mu_ held

  FenceGateOptions options_;
  std::shared_ptr<spdlog::logger> logger_;
  mutable std::array<Shard, kShards> shards_;

  // With a state file, persisted_ is exactly what the file holds. In
  // Persist::every_raise mode every raise takes persist_mu_ and reaches the
  // file before the shard, so a mark in memory is never ahead of the file.
  std::mutex persist_mu_;
  std::map<std::string, FencingToken, std::less<>> persisted_;  // GUARDED_BY(persist_mu_)
  detail::UniqueFd lock_fd_;  // the state file's flock, held while the gate lives

  std::atomic<std::uint64_t> admitted_{0};
  std::atomic<std::uint64_t> stale_{0};
  std::atomic<std::uint64_t> foreign_{0};
  std::atomic<std::uint64_t> malformed_{0};
};

}  // namespace zklock
