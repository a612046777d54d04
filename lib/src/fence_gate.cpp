#include "zklock/fence_gate.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <spdlog/spdlog.h>
#include <utility>

#include "crc32.hpp"
#include "zklock/error.hpp"

namespace zklock {
namespace {

constexpr std::string_view kMagic = "zklock-fence-state";
constexpr int kFormatVersion = 1;

constexpr char kHex[] = "0123456789ABCDEF";

// Resource names are arbitrary bytes; in the state file they are one
// space-free word: bytes outside '!'..'~', and '%', become %XX.
std::string percent_encode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (unsigned char c : s) {
    if (c <= 0x20 || c >= 0x7f || c == '%') {
      out += '%';
      out += kHex[c >> 4];
      out += kHex[c & 0xF];
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

int hex_value(char c) noexcept {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

std::optional<std::string> percent_decode(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c == '%') {
      if (i + 2 >= s.size()) return std::nullopt;
      const int hi = hex_value(s[i + 1]), lo = hex_value(s[i + 2]);
      if (hi < 0 || lo < 0) return std::nullopt;
      out += static_cast<char>(hi * 16 + lo);
      i += 2;
    } else if (c <= 0x20 || c >= 0x7f) {
      return std::nullopt;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out;
}

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

std::string hex8(std::uint32_t v) {
  std::string out(8, '0');
  for (int i = 7; i >= 0; --i, v >>= 4) out[static_cast<std::size_t>(i)] = "0123456789abcdef"[v & 0xF];
  return out;
}

[[noreturn]] void throw_io(const std::filesystem::path& file, std::string_view what, int err) {
  throw Error(Errc::io_error, "fence gate state file '" + file.string() + "': " +
                                  std::string(what) + ": " + std::strerror(err));
}

[[noreturn]] void throw_corrupt(const std::filesystem::path& file, std::string_view what) {
  throw Error(Errc::protocol_error,
              "fence gate state file '" + file.string() + "' is refused: " + std::string(what) +
                  "; the high-water marks it held are unknown. Restore it from a backup, or, if "
                  "every lock holder is known to be gone, delete it deliberately");
}

// Closes a file descriptor on scope exit.
struct FdCloser {
  int fd;
  ~FdCloser() {
    if (fd >= 0) ::close(fd);
  }
};

void write_all(int fd, std::string_view data, const std::filesystem::path& file) {
  while (!data.empty()) {
    const ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_io(file, "write", errno);
    }
    data.remove_prefix(static_cast<std::size_t>(n));
  }
}

// Reads the whole file; nullopt when it does not exist.
std::optional<std::string> read_file(const std::filesystem::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    throw_io(file, "open", errno);
  }
  FdCloser closer{fd};
  std::string out;
  char buf[65536];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0) {
      if (errno == EINTR) continue;
      throw_io(file, "read", errno);
    }
    if (n == 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  return out;
}

std::string header_line(std::size_t entries, std::size_t bytes, std::uint32_t crc) {
  return std::string(kMagic) + " " + std::to_string(kFormatVersion) +
         " entries=" + std::to_string(entries) + " bytes=" + std::to_string(bytes) +
         " crc32=" + hex8(crc) + "\n";
}

bool parse_uint(std::string_view s, std::uint64_t& out, int base = 10) {
  if (s.empty()) return false;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), out, base);
  return ec == std::errc() && end == s.data() + s.size();
}

// Removes and returns "key=" ... up to the next space (or the end).
std::optional<std::string_view> take_field(std::string_view& rest, std::string_view key) {
  if (rest.substr(0, key.size()) != key) return std::nullopt;
  rest.remove_prefix(key.size());
  const auto sp = rest.find(' ');
  auto value = rest.substr(0, sp);
  rest.remove_prefix(sp == std::string_view::npos ? rest.size() : sp + 1);
  return value;
}

std::map<std::string, FencingToken, std::less<>> parse_state(std::string_view text,
                                                             const std::filesystem::path& file) {
  if (text.empty()) throw_corrupt(file, "it is empty (truncated)");
  const auto nl = text.find('\n');
  if (nl == std::string_view::npos) throw_corrupt(file, "it has no complete header line (truncated)");
  const std::string_view header = text.substr(0, nl);
  const std::string_view body = text.substr(nl + 1);

  std::string_view rest = header;
  if (rest.substr(0, kMagic.size() + 1) != std::string(kMagic) + " ") {
    throw_corrupt(file, "it does not start with '" + std::string(kMagic) + "'");
  }
  rest.remove_prefix(kMagic.size() + 1);
  const auto sp = rest.find(' ');
  std::uint64_t version = 0;
  if (!parse_uint(rest.substr(0, sp), version)) throw_corrupt(file, "its header has no version");
  if (version != kFormatVersion) {
    throw_corrupt(file, "format version " + std::to_string(version) + " is not supported (this build reads version " +
                            std::to_string(kFormatVersion) + ")");
  }
  rest.remove_prefix(sp == std::string_view::npos ? rest.size() : sp + 1);
  std::uint64_t entries = 0, bytes = 0, crc = 0;
  auto e = take_field(rest, "entries=");
  auto b = take_field(rest, "bytes=");
  auto c = take_field(rest, "crc32=");
  if (!e || !b || !c || !rest.empty() || !parse_uint(*e, entries) || !parse_uint(*b, bytes) ||
      c->size() != 8 || !parse_uint(*c, crc, 16) ||
      header_line(entries, bytes, static_cast<std::uint32_t>(crc)) != std::string(header) + "\n") {
    throw_corrupt(file, "its header line is malformed");
  }
  if (body.size() != bytes) {
    throw_corrupt(file, "its header promises " + std::to_string(bytes) + " bytes of marks but " +
                            std::to_string(body.size()) + " follow (truncated or altered)");
  }
  if (crc32(body) != crc) throw_corrupt(file, "its checksum does not match its content (corrupted)");

  std::map<std::string, FencingToken, std::less<>> marks;
  std::string_view lines = body;
  std::size_t line_no = 1;
  while (!lines.empty()) {
    ++line_no;
    const auto end = lines.find('\n');
    if (end == std::string_view::npos) throw_corrupt(file, "its last line is incomplete");
    const std::string_view line = lines.substr(0, end);
    lines.remove_prefix(end + 1);
    const auto space = line.find(' ');
    const auto where = "line " + std::to_string(line_no);
    if (space == std::string_view::npos) throw_corrupt(file, where + " is not '<token> <resource>'");
    auto token = FencingToken::try_parse(line.substr(0, space));
    auto resource = percent_decode(line.substr(space + 1));
    if (!token) throw_corrupt(file, where + " holds a malformed token");
    if (!resource || resource->empty()) throw_corrupt(file, where + " holds a malformed resource name");
    if (!marks.emplace(std::move(*resource), std::move(*token)).second) {
      throw_corrupt(file, where + " repeats a resource");
    }
  }
  if (marks.size() != entries) {
    throw_corrupt(file, "its header promises " + std::to_string(entries) + " entries but " +
                            std::to_string(marks.size()) + " follow");
  }
  return marks;
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
      return "malformed fencing token: expected <ensemble-id>:<czxid>";
  }
  return "unknown verdict";
}

FenceGate::FenceGate(FenceGateOptions options) : options_(std::move(options)) {
  if (!options_.logger_name.empty()) logger_ = spdlog::get(options_.logger_name);
  if (options_.state_file.empty()) return;

  const auto& file = options_.state_file;
  const auto lock_path = file.string() + ".lock";
  lock_fd_ = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd_ < 0) throw_io(file, "open " + lock_path, errno);
  if (::flock(lock_fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(lock_fd_);
    lock_fd_ = -1;
    if (err == EWOULDBLOCK) {
      throw Error(Errc::io_error, "fence gate state file '" + file.string() +
                                      "' is in use by another FenceGate (" + lock_path + " is locked)");
    }
    throw_io(file, "flock " + lock_path, err);
  }
  try {
    auto text = read_file(file);
    if (!text) {
      if (options_.require_state_file) {
        throw Error(Errc::io_error, "fence gate state file '" + file.string() +
                                        "' does not exist, and the gate was told to require it");
      }
      return;
    }
    persisted_ = parse_state(*text, file);
  } catch (...) {
    ::close(lock_fd_);
    lock_fd_ = -1;
    throw;
  }
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
  if (lock_fd_ >= 0) ::close(lock_fd_);
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
  } else if (token.czxid() < mark.czxid()) {
    r.verdict = AdmitResult::Verdict::stale;
    r.highest = mark;
  } else {
    r.verdict = AdmitResult::Verdict::admitted;
    r.highest = token;
    r.raised = token.czxid() > mark.czxid();
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

void FenceGate::write_state_locked() {
  const auto& file = options_.state_file;
  std::string body;
  for (const auto& [resource, token] : persisted_) {
    body += token.str();
    body += ' ';
    body += percent_encode(resource);
    body += '\n';
  }
  const std::string header = header_line(persisted_.size(), body.size(), crc32(body));

  const std::filesystem::path tmp = file.string() + ".tmp";
  {
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw_io(file, "create " + tmp.string(), errno);
    FdCloser closer{fd};
    write_all(fd, header, tmp);
    write_all(fd, body, tmp);
    if (::fsync(fd) != 0) throw_io(file, "fsync " + tmp.string(), errno);
  }
  if (::rename(tmp.c_str(), file.c_str()) != 0) throw_io(file, "rename " + tmp.string(), errno);
  // The rename is durable only once the directory entry is.
  const auto dir = file.has_parent_path() ? file.parent_path() : std::filesystem::path(".");
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd < 0) throw_io(file, "open directory " + dir.string(), errno);
  FdCloser closer{dfd};
  if (::fsync(dfd) != 0) throw_io(file, "fsync directory " + dir.string(), errno);
}

}  // namespace zklock
