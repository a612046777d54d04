// The real-ZooKeeper harness's common vocabulary: its clock, its one error
// type, bounded polling, and the small helpers its parts share.
#pragma once

#include <chrono>
#include <cstddef>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <thread>
#include <utility>

namespace zklock::test {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

// Every harness failure: a wait ran out, a process died, a spawn failed.
class HarnessError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Milliseconds since `t`, for the figures tests print.
inline double ms_since(Clock::time_point t) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t).count();
}

// Polls `pred` from the calling thread every few milliseconds until it holds
// or `timeout` passes; returns whether it held. For conditions that have no
// event to wait on (a node count seen through a listing, a process's output).
template <class Pred>
bool eventually(Pred pred, milliseconds timeout = milliseconds(10000)) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(milliseconds(5));
  }
  return pred();
}

// A new, empty directory $TMPDIR/<prefix>XXXXXX (mkdtemp).  Throws HarnessError.
std::filesystem::path make_temp_dir(const std::string& prefix);

// A fresh temporary directory (make_temp_dir), removed with everything in it
// when the object goes.  Move-only.
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "zklock-test-") : path_(make_temp_dir(prefix)) {}
  TempDir(TempDir&& other) noexcept : path_(std::exchange(other.path_, {})) {}
  TempDir& operator=(TempDir&&) = delete;
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  ~TempDir();
  const std::filesystem::path& path() const { return path_; }
  std::filesystem::path operator/(const std::string& name) const { return path_ / name; }

 private:
  std::filesystem::path path_;
};

// The whole file, or "" if it cannot be read (a log that was never written).
std::string read_file(const std::filesystem::path& file);

// Helpers the harness's own files share; not meant for tests.
namespace detail {
std::string errno_text(const std::string& what, int err);  // "what: strerror(err)"
milliseconds remaining(Clock::time_point deadline);         // never negative
void poll_pause(Clock::time_point deadline);                // one short poll, never past deadline
std::string last_lines(const std::filesystem::path& file, std::size_t lines);  // "" if unreadable
}  // namespace detail

}  // namespace zklock::test
