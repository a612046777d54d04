// Shared pieces of the stories told with real processes (tests/loss,
// tests/faults): the story worker as a child process with a command FIFO,
// its event lines, the fenced store, and small ZooKeeper probes. Every
// includer defines ZKLOCK_TEST_WORKER and FENCED_STORE_BIN (zklock_add_gtest's
// BINARIES).
//
// Every wait has a deadline and throws StoryError with what was seen, which
// gtest reports as a failure of the running test.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "zk_harness.hpp"
#include "zklock/protocol/node_name.hpp"
#include "zklock/token.hpp"

namespace zklock::stories {

using namespace std::chrono_literals;
using test::ChildProcess;
using test::SpawnOptions;
using test::TempDir;
using std::chrono::milliseconds;

// The C client's INFO lines of the tests' own probe sessions drown the story
// output: every story binary sets the level once, at start-up.
inline const bool kQuietZkLog = (zoo_set_debug_level(ZOO_LOG_LEVEL_WARN), true);

// One "[story] ..." line: the figure a story measured.
template <typename... Args>
void report(const char* fmt, Args... args) {
  std::printf("[story] ");
  std::printf(fmt, args...);
  std::printf("\n");
  std::fflush(stdout);
}

class StoryError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// CLOCK_MONOTONIC in microseconds: the clock of the workers' "t=" fields.
inline std::int64_t mono_us() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

// One worker event line: "<kind> k=v ... [msg=|detail=rest of line] t=<us>".
struct Event {
  std::string kind;
  std::map<std::string, std::string> fields;
  std::int64_t t_us = 0;
  std::string raw;
  std::string worker;  // the worker's name, filled in by StoryWorker

  std::string get(const std::string& key) const {
    auto it = fields.find(key);
    return it == fields.end() ? std::string() : it->second;
  }
  bool has(const std::string& key, const std::string& value) const { return get(key) == value; }
};

inline Event parse_event(const std::string& line) {
  Event e;
  e.raw = line;
  std::string body = line;
  if (auto p = body.rfind(" t="); p != std::string::npos) {
    e.t_us = std::strtoll(body.c_str() + p + 3, nullptr, 10);
    body.erase(p);
  }
  // msg= and detail= take the rest of the line (they may hold spaces).
  for (const char* tail : {" msg=", " detail="}) {
    if (auto p = body.find(tail); p != std::string::npos) {
      std::string key(tail + 1, std::strlen(tail) - 2);
      e.fields[key] = body.substr(p + std::strlen(tail));
      body.erase(p);
    }
  }
  std::istringstream in(body);
  in >> e.kind;
  std::string tok;
  while (in >> tok) {
    if (auto eq = tok.find('='); eq != std::string::npos) e.fields[tok.substr(0, eq)] = tok.substr(eq + 1);
  }
  return e;
}

struct WorkerConfig {
  std::string name;
  std::string connect;
  std::string lock;
  std::string db;
  int session_timeout_ms = 1000;
  int connect_timeout_ms = 10000;
  int acquire_timeout_ms = 0;
  int retain_ms = 0;  // MutexOptions::retain
  int wait_check_ms = 0;  // ClientOptions::wait_check (0: the default, the negotiated timeout)
  bool strict = false;
  // Mode: commands (default), waiters > 0, or loop.
  int waiters = 0;
  bool loop = false;
  int hold_ms = 0;
  int writes = 2;
  std::string key = "story";
};

// zklock_test_worker story as a child process (see tests/worker/story_mode.cpp
// for the protocol). Move-only; the destructor kills the worker.
class StoryWorker {
 public:
  static StoryWorker start(const WorkerConfig& cfg) {
    StoryWorker w;
    w.name_ = cfg.name;
    w.dir_ = std::make_unique<TempDir>();
    std::vector<std::string> argv = {ZKLOCK_TEST_WORKER, "story", "--connect", cfg.connect, "--lock", cfg.lock,
                                     "--name", cfg.name, "--session-timeout", std::to_string(cfg.session_timeout_ms),
                                     "--connect-timeout", std::to_string(cfg.connect_timeout_ms),
                                     "--acquire-timeout", std::to_string(cfg.acquire_timeout_ms),
                                     "--retain-ms", std::to_string(cfg.retain_ms),
                                     "--wait-check-ms", std::to_string(cfg.wait_check_ms),
                                     "--policy", cfg.strict ? "strict" : "tolerant",
                                     "--hold-ms", std::to_string(cfg.hold_ms)};
    if (!cfg.db.empty()) argv.insert(argv.end(), {"--db", cfg.db});
    if (cfg.waiters > 0) {
      argv.insert(argv.end(), {"--waiters", std::to_string(cfg.waiters)});
    } else if (cfg.loop) {
      argv.insert(argv.end(), {"--loop", "--key", cfg.key, "--writes", std::to_string(cfg.writes)});
    } else {
      auto fifo = *w.dir_ / "commands";
      if (::mkfifo(fifo.c_str(), 0600) != 0) throw StoryError("mkfifo failed");
      // O_RDWR: opening does not wait for the reader, and the FIFO never
      // reports EOF to the worker while we hold it.
      w.fifo_fd_ = ::open(fifo.c_str(), O_RDWR | O_CLOEXEC);
      if (w.fifo_fd_ < 0) throw StoryError("open fifo failed");
      argv.insert(argv.end(), {"--commands", fifo.string()});
    }
    SpawnOptions opts;
    opts.argv = argv;
    w.proc_ = ChildProcess::spawn(opts);
    return w;
  }

  StoryWorker() = default;
  StoryWorker(StoryWorker&& o) noexcept { *this = std::move(o); }
  StoryWorker& operator=(StoryWorker&& o) noexcept {
    if (this != &o) {
      close_fifo();
      proc_ = std::move(o.proc_);
      dir_ = std::move(o.dir_);
      fifo_fd_ = std::exchange(o.fifo_fd_, -1);
      name_ = std::move(o.name_);
      events_ = std::move(o.events_);
      consumed_ = std::move(o.consumed_);
    }
    return *this;
  }
  ~StoryWorker() {
    close_fifo();
    if (proc_.pid() > 0 && proc_.running()) {
      proc_.signal(SIGCONT);
      proc_.signal(SIGKILL);
      proc_.wait_exit(5000ms);
    }
  }

  const std::string& name() const { return name_; }
  ChildProcess& process() { return proc_; }
  pid_t pid() const { return proc_.pid(); }
  void signal(int sig) { proc_.signal(sig); }

  void send(const std::string& command) {
    std::string line = command + "\n";
    if (::write(fifo_fd_, line.data(), line.size()) != static_cast<ssize_t>(line.size()))
      throw StoryError(name_ + ": writing command failed");
  }
  // Closing the FIFO makes a command-mode worker release and exit.
  void close_fifo() {
    if (fifo_fd_ >= 0) ::close(fifo_fd_);
    fifo_fd_ = -1;
  }

  // The next event, if one arrives within `timeout`.
  std::optional<Event> next(milliseconds timeout) {
    auto line = proc_.read_line(timeout);
    if (!line) return std::nullopt;
    Event e = parse_event(*line);
    e.worker = name_;
    events_.push_back(e);
    consumed_.push_back(false);
    return e;
  }
  // The first event of `kind` satisfying `pred` that no earlier expect()
  // returned: one already read (events of different threads of the worker
  // may arrive in either order), else the next to arrive. Throws StoryError
  // on timeout or when the worker's output ends.
  Event expect(const std::string& kind, milliseconds timeout,
               const std::function<bool(const Event&)>& pred = {}) {
    auto matches = [&](const Event& e) { return e.kind == kind && (!pred || pred(e)); };
    for (std::size_t i = 0; i < events_.size(); ++i) {
      if (!consumed_[i] && matches(events_[i])) {
        consumed_[i] = true;
        return events_[i];
      }
    }
    auto deadline = test::Clock::now() + timeout;
    while (true) {
      auto left = std::chrono::duration_cast<milliseconds>(deadline - test::Clock::now());
      if (left <= 0ms) break;
      auto e = next(left);
      if (!e) break;
      if (matches(*e)) {
        consumed_.back() = true;
        return *e;
      }
    }
    throw StoryError(name_ + ": no '" + kind + "' event within " + std::to_string(timeout.count()) +
                     " ms; events so far:\n" + history());
  }
  // Reads whatever arrives within `window` without expecting anything.
  void drain(milliseconds window) {
    auto deadline = test::Clock::now() + window;
    while (true) {
      auto left = std::chrono::duration_cast<milliseconds>(deadline - test::Clock::now());
      if (left <= 0ms || !next(left)) break;
    }
  }
  const std::vector<Event>& events() const { return events_; }
  bool saw(const std::string& kind) const {
    for (auto& e : events_) {
      if (e.kind == kind) return true;
    }
    return false;
  }
  std::string history() const {
    std::string out;
    for (auto& e : events_) out += "  [" + name_ + "] " + e.raw + "\n";
    return out;
  }

 private:
  ChildProcess proc_;
  std::unique_ptr<TempDir> dir_;
  int fifo_fd_ = -1;
  std::string name_;
  std::vector<Event> events_;
  std::vector<bool> consumed_;  // parallel to events_: returned by expect()
};

// A worker started and past its "ready" line (kept in `ready` if asked).
inline StoryWorker start_ready(const WorkerConfig& c, Event* ready = nullptr) {
  auto w = StoryWorker::start(c);
  auto e = w.expect("ready", 20000ms);
  if (ready) *ready = e;
  return w;
}

// A command-mode worker's configuration (session timeout 1 s unless a story
// needs longer).
inline WorkerConfig config(const std::string& name, const std::string& connect, const std::string& lock,
                           const std::string& db = {}, int session_ms = 1000) {
  WorkerConfig c;
  c.name = name;
  c.connect = connect;
  c.lock = lock;
  c.db = db;
  c.session_timeout_ms = session_ms;
  return c;
}

// Children of `lock` sorted by sequence (zklock nodes only).
inline std::vector<protocol::LockNodeName> queue_of(test::ZkHandle& h, const std::string& lock) {
  std::vector<std::string> names;
  std::vector<protocol::LockNodeName> out;
  if (h.children(lock, &names) != ZOK) return out;
  for (auto& n : names) {
    if (auto p = protocol::parse_lock_node_name(n)) out.push_back(*p);
  }
  std::sort(out.begin(), out.end(),
            [](const protocol::LockNodeName& a, const protocol::LockNodeName& b) { return protocol::compare_sequence(a.sequence, b.sequence) < 0; });
  return out;
}

inline bool node_exists(test::ZkHandle& h, const std::string& path, ::Stat* st = nullptr) {
  return h.exists(path, st) == ZOK;
}

// `fenced-store --db DB get KEY`: the value, or nullopt when absent.
inline std::optional<std::string> store_get(const std::string& db, const std::string& key) {
  const auto r = test::run_to_exit({.argv = {FENCED_STORE_BIN, "--db", db, "get", key}}, 10000ms);
  if (r.timed_out) throw StoryError("fenced-store get did not finish: " + r.describe());
  if (r.code == 66) return std::nullopt;
  if (r.code != 0) throw StoryError("fenced-store get failed: " + r.describe());
  return r.out.substr(0, r.out.find('\n'));
}

inline FencingToken token_of(const Event& e) { return FencingToken::parse(e.get("token")); }

// Polls `cond` every 20 ms until it holds or `timeout` passes.
inline bool eventually(const std::function<bool()>& cond, milliseconds timeout) {
  auto deadline = test::Clock::now() + timeout;
  while (true) {
    if (cond()) return true;
    if (test::Clock::now() >= deadline) return false;
    ::usleep(20000);
  }
}

inline double ms_between(std::int64_t from_us, std::int64_t to_us) {
  return static_cast<double>(to_us - from_us) / 1000.0;
}

// Waits until `lock` has `n` queue nodes; throws StoryError if it does not.
inline void wait_queue_size(test::ZkHandle& h, const std::string& lock, std::size_t n, milliseconds timeout = 10000ms) {
  if (!eventually([&] { return queue_of(h, lock).size() == n; }, timeout))
    throw StoryError(lock + ": queue did not reach " + std::to_string(n) + " nodes (has " +
                     std::to_string(queue_of(h, lock).size()) + ")");
}

}  // namespace zklock::stories
