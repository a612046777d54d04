// FenceGate: admits a write only when its fencing token is not older than the fence's mark (by (czxid, ordinal)).
//
// The marks live in memory, sharded; with a state file every raise (or every
// flush) also reaches disk through fence_state_file.hpp.
#include "zklock/fence_gate.hpp"

#include <unistd.h>

#include <spdlog/spdlog.h>
#include <utility>

#include "fence_state_file.hpp"
#include "zklock/error.hpp"

namespace zklock {

void detail::UniqueFd::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

namespace {

constexpr char kHex[] = "0123456789ABCDEF";

// For log lines: printable ASCII as is, anything else as \xNN, at most 200 bytes.
std::string printable(std::string_view s) {
  std::string out;
  const std::size_t n = std::min<std::size_t>(s.size(), 200);
  for (std::size_t i = 0; i < n; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f && c != '\\') {
      out += static_cast<char>(c);
    } else {
      out += "\\x";
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    }
  }
  if (s.size() > n) out += "...";
  return out;
}

}  // namespace

std::string_view verdict_name(AdmitResult::Verdict verdict) noexcept {
  switch (verdict) {
    case AdmitResult::Verdict::admitted: return "admitted";
    case AdmitResult::Verdict::stale: return "stale";
    case AdmitResult::Verdict::foreign_source: return "foreign_source";
    case AdmitResult::Verdict::malformed: return "malformed";
  }
  return "unknown";
}

std::string AdmitResult::reason() const {
  switch (verdict) {
    case Verdict::admitted:
      return "admitted token " + presented.str();
    case Verdict::stale:
      return "stale token " + presented.str() + ": highest seen " + highest.str();
    case Verdict::foreign_source:
      return "token " + presented.str() + " comes from ensemble " + presented.ensemble_id() +
             ", but the resource is fenced by ensemble " + highest.ensemble_id() +
             " (highest seen " + highest.str() + ")";
    case Verdict::malformed:
      return "malformed fencing token: expected <ensemble-id>:<czxid>[.<lease ordinal>]";
  }
  return "unknown verdict";
}

FenceGate::FenceGate(FenceGateOptions options) : options_(std::move(options)) {
  if (!options_.logger_name.empty()) logger_ = spdlog::get(options_.logger_name);
  if (options_.state_file.empty()) return;

  const auto& file = options_.state_file;
  lock_fd_ = detail::lock_fence_state(file);
  // A throw below closes lock_fd_ (a member) and so lets go of the flock.
  auto marks = detail::read_fence_state(file);
  if (!marks) {
    if (options_.require_state_file) {
      throw Error(Errc::io_error, "fence gate state file '" + file.string() +
                                      "' does not exist, and the gate was told to require it");
    }
    return;
  }
  persisted_ = std::move(*marks);
  for (const auto& [resource, token] : persisted_) {
    shard_for(resource).marks.emplace(resource, token);
  }
}

FenceGate::~FenceGate() {
  if (!options_.state_file.empty() && options_.persist == Persist::on_flush) {
    try {
      flush();
    } catch (const std::exception& e) {
      auto* log = logger_ ? logger_.get() : spdlog::default_logger_raw();
      log->error("fence gate: final flush failed, marks raised since the last flush are lost: {}",
                 e.what());
    }
  }
  // lock_fd_ closes after this body, once the final flush is done.
}

FenceGate::Shard& FenceGate::shard_for(std::string_view resource) const noexcept {
  // The maps hash with the same function; take high bits here so a shard's
  // keys still spread over its map's buckets.
  const std::size_t h = Hash{}(resource);
  return shards_[(h >> 32 ^ h >> 7) % kShards];
}

AdmitResult FenceGate::decide(MarkMap& marks, std::string_view resource, const FencingToken& token,
                              bool apply_raise) const {
  AdmitResult r;
  r.presented = token;
  auto it = marks.find(resource);
  if (it == marks.end()) {
    r.verdict = AdmitResult::Verdict::admitted;
    r.highest = token;
    r.raised = true;
    if (apply_raise) marks.emplace(std::string(resource), token);
    return r;
  }
  const FencingToken& mark = it->second;
  if (mark.ensemble_id() != token.ensemble_id()) {
    r.verdict = AdmitResult::Verdict::foreign_source;
    r.highest = mark;
  } else if (token < mark) {  // (czxid, ordinal): an earlier lease, of this node or an earlier one
    r.verdict = AdmitResult::Verdict::stale;
    r.highest = mark;
  } else {
    r.verdict = AdmitResult::Verdict::admitted;
    r.highest = token;
    r.raised = token > mark;
    if (r.raised && apply_raise) it->second = token;
  }
  return r;
}

AdmitResult FenceGate::admit(std::string_view resource, const FencingToken& token) {
  if (resource.empty()) throw Error(Errc::invalid_argument, "FenceGate::admit: empty resource name");
  if (token.empty()) {
    AdmitResult r;
    r.verdict = AdmitResult::Verdict::malformed;
    return finish(resource, std::move(r));
  }
  const bool durable = !options_.state_file.empty() && options_.persist == Persist::every_raise;
  Shard& shard = shard_for(resource);
  AdmitResult r;
  {
    std::lock_guard lock(shard.mu);
    r = decide(shard.marks, resource, token, /*apply_raise=*/!durable);
  }
  if (durable && r.raised) r = admit_durable_raise(resource, token);
  return finish(resource, std::move(r));
}

AdmitResult FenceGate::admit(std::string_view resource, std::string_view token_text) {
  if (resource.empty()) throw Error(Errc::invalid_argument, "FenceGate::admit: empty resource name");
  if (auto token = FencingToken::try_parse(token_text)) return admit(resource, *token);
  AdmitResult r;
  r.verdict = AdmitResult::Verdict::malformed;
  malformed_.fetch_add(1, std::memory_order_relaxed);
  log_rejection(resource, r, token_text);
  return r;
}

// Every raise holds persist_mu_ from its re-check until its mark is in the
// shard, and only raises change a mark; so between the re-check and the
// store below the mark cannot move, and the file never trails memory.
AdmitResult FenceGate::admit_durable_raise(std::string_view resource, const FencingToken& token) {
  std::lock_guard persist(persist_mu_);
  Shard& shard = shard_for(resource);
  AdmitResult r;
  {
    std::lock_guard lock(shard.mu);
    r = decide(shard.marks, resource, token, /*apply_raise=*/false);
  }
  if (!r.raised) return r;  // another raise overtook us: now stale, foreign or a repeat

  auto [it, inserted] = persisted_.try_emplace(std::string(resource));
  FencingToken previous = it->second;
  it->second = token;
  try {
    write_state_locked();
  } catch (...) {
    if (inserted) {
      persisted_.erase(it);
    } else {
      it->second = std::move(previous);
    }
    throw;
  }
  std::lock_guard lock(shard.mu);
  shard.marks.insert_or_assign(std::string(resource), token);
  return r;
}

AdmitResult FenceGate::finish(std::string_view resource, AdmitResult result) {
  switch (result.verdict) {
    case AdmitResult::Verdict::admitted:
      admitted_.fetch_add(1, std::memory_order_relaxed);
      return result;
    case AdmitResult::Verdict::stale: stale_.fetch_add(1, std::memory_order_relaxed); break;
    case AdmitResult::Verdict::foreign_source: foreign_.fetch_add(1, std::memory_order_relaxed); break;
    case AdmitResult::Verdict::malformed: malformed_.fetch_add(1, std::memory_order_relaxed); break;
  }
  log_rejection(resource, result, {});
  return result;
}

void FenceGate::log_rejection(std::string_view resource, const AdmitResult& r,
                              std::string_view presented_text) const {
  auto* log = logger_ ? logger_.get() : spdlog::default_logger_raw();
  if (!log->should_log(spdlog::level::warn)) return;
  const auto shown_resource = printable(resource);
  if (r.verdict == AdmitResult::Verdict::malformed) {
    log->warn("fence gate rejected a malformed token for resource '{}': presented '{}'",
              shown_resource, printable(presented_text));
    return;
  }
  const bool stale = r.verdict == AdmitResult::Verdict::stale;
  log->warn("fence gate rejected a {} token for resource '{}': presented {} (source {}), highest seen {} "
            "(source {}); {}",
            stale ? "stale" : "foreign-source", shown_resource, r.presented.str(),
            r.presented.ensemble_id(), r.highest.str(), r.highest.ensemble_id(),
            stale ? "the writer kept writing after losing its lock (paused, or a bug)"
                  : "the writer holds a lock from another ZooKeeper ensemble");
}

std::optional<FencingToken> FenceGate::highest(std::string_view resource) const {
  Shard& shard = shard_for(resource);
  std::lock_guard lock(shard.mu);
  auto it = shard.marks.find(resource);
  if (it == shard.marks.end()) return std::nullopt;
  return it->second;
}

RejectionCounts FenceGate::rejections() const noexcept {
  RejectionCounts c;
  c.stale = stale_.load(std::memory_order_relaxed);
  c.foreign_source = foreign_.load(std::memory_order_relaxed);
  c.malformed = malformed_.load(std::memory_order_relaxed);
  return c;
}

std::uint64_t FenceGate::admitted() const noexcept {
  return admitted_.load(std::memory_order_relaxed);
}

void FenceGate::flush() {
  if (options_.state_file.empty()) return;
  std::lock_guard persist(persist_mu_);
  if (options_.persist == Persist::on_flush) {
    // Marks only rise, so merging each shard's current marks in is enough.
    for (auto& shard : shards_) {
      std::lock_guard lock(shard.mu);
      for (const auto& [resource, token] : shard.marks) persisted_.insert_or_assign(resource, token);
    }
  }
  write_state_locked();
}

void FenceGate::write_state_locked() { detail::write_fence_state(options_.state_file, persisted_); }

}  // namespace zklock
