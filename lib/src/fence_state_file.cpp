// The fence gate's state file: encoding, parsing, the owner's flock, and atomic replacement on disk.
#include "fence_state_file.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstring>
#include <string_view>

#include "crc32.hpp"
#include "zklock/error.hpp"

namespace zklock::detail {
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

FenceMarks parse_state(std::string_view text, const std::filesystem::path& file) {
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

  FenceMarks marks;
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

UniqueFd lock_fence_state(const std::filesystem::path& file) {
  const auto lock_path = file.string() + ".lock";
  UniqueFd fd(::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644));
  if (fd.get() < 0) throw_io(file, "open " + lock_path, errno);
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    fd.reset();
    if (err == EWOULDBLOCK) {
      throw Error(Errc::io_error, "fence gate state file '" + file.string() +
                                      "' is in use by another FenceGate (" + lock_path + " is locked)");
    }
    throw_io(file, "flock " + lock_path, err);
  }
  return fd;
}

std::optional<FenceMarks> read_fence_state(const std::filesystem::path& file) {
  auto text = read_file(file);
  if (!text) return std::nullopt;
  return parse_state(*text, file);
}

void write_fence_state(const std::filesystem::path& file, const FenceMarks& marks) {
  std::string body;
  for (const auto& [resource, token] : marks) {
    body += token.str();
    body += ' ';
    body += percent_encode(resource);
    body += '\n';
  }
  const std::string header = header_line(marks.size(), body.size(), crc32(body));

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

}  // namespace zklock::detail
