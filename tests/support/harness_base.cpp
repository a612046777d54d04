// The harness's shared helpers: errno text, deadlines, log tails, temp dirs.
#include "harness_base.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <fstream>
#include <iterator>
#include <thread>
#include <vector>

namespace zklock::test {
namespace fs = std::filesystem;

namespace detail {

namespace {
constexpr milliseconds kPoll{20};
}  // namespace

std::string errno_text(const std::string& what, int err) {
  return what + ": " + std::strerror(err);
}

milliseconds remaining(Clock::time_point deadline) {
  auto left = std::chrono::duration_cast<milliseconds>(deadline - Clock::now());
  return std::max(left, milliseconds(0));
}

// Sleeps one poll interval, but never past `deadline`.
void poll_pause(Clock::time_point deadline) {
  std::this_thread::sleep_for(std::min(kPoll, remaining(deadline)));
}

std::string last_lines(const fs::path& file, std::size_t lines) {
  std::ifstream in(file);
  if (!in) return "";
  std::deque<std::string> tail;
  std::string line;
  while (std::getline(in, line)) {
    tail.push_back(line);
    if (tail.size() > lines) tail.pop_front();
  }
  std::string out;
  for (auto& l : tail) out += l + "\n";
  return out;
}

}  // namespace detail

fs::path make_temp_dir(const std::string& prefix) {
  fs::path base = fs::temp_directory_path();
  std::string templ = (base / (prefix + "XXXXXX")).string();
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (::mkdtemp(buf.data()) == nullptr) throw HarnessError(detail::errno_text("mkdtemp " + templ, errno));
  return fs::path(buf.data());
}

TempDir::~TempDir() {
  if (path_.empty()) return;
  std::error_code ec;
  fs::remove_all(path_, ec);
}

std::string read_file(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace zklock::test
