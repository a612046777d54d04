// zklock_story_worker: one real lock client for the failure stories.
//
// A separate process, so the stories can freeze it (SIGSTOP), kill it
// (SIGKILL) and resume it (SIGCONT) like an operating system would. It reports
// every event as one line on stdout, "<event> key=value ... t=<us>", where t
// is CLOCK_MONOTONIC in microseconds (one clock for every process on the
// machine, so the test orders events of different workers):
//
//   ready      session=0x.. timeout=<negotiated ms> pid=N
//   state      s=connected|suspended|reconnected|lost session=0x.. epoch=N
//   acquired   idx=I token=T node=P session=0x..
//   acquire_failed idx=I code=<errc> msg=<text>
//   lost       idx=I reason=<loss reason> detail=<text>
//   check      valid=0|1 suspended=0|1 loss=<reason|none> session=0x.. epoch=N
//   write      key=K value=V token=T valid_before=0|1 rc=<exit code> msg=<store's line>
//   releasing  idx=I token=T      (printed before the delete is sent)
//   released   idx=I
//   rss        kb=N
//
// Two ways to drive it:
//  * Commands, one per line, from a FIFO named by --commands (the test holds
//    the write end; a command sent while the worker is frozen is read the
//    instant it resumes, before anything else the main thread does):
//      acquire          start one asynchronous acquisition (honours
//                       --acquire-timeout; "cancel" stops it)
//      cancel           fire the stop_token of the pending acquisition
//      check            report valid()/suspended()/loss of the current lease
//      write KEY VALUE [FENCE]
//                       report valid() and then write VALUE with the lease's
//                       token through fenced-store (whatever valid() said: the
//                       store, not the client, is what must refuse it);
//                       FENCE is passed as --fence (one fence per lock)
//      release          release the current lease
//      rss              report the resident set size
//      exit             release everything and exit 0
//  * --waiters N: N asynchronous acquisitions with distinct owners, each
//    released by the main thread --hold-ms after its grant (story 3), then
//    exit when all are done.
//  * --loop: acquire, write --writes times (--hold-ms apart, without checking
//    valid(): a client that believes it still holds the lock), release;
//    repeat until SIGTERM (the chaos run).
//
// Writes go through the real fenced-store binary (FENCED_STORE_BIN), spawned
// per write with --db; its exit code and its one stderr line are reported.
#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <stop_token>
#include <string>
#include <thread>
#include <vector>

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "zklock/client.hpp"
#include "zklock/error.hpp"
#include "zklock/fair_mutex.hpp"
#include "zklock/lease.hpp"

extern char** environ;

namespace {

using namespace std::chrono_literals;

std::int64_t mono_us() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

std::mutex g_out_mu;

// One event line; values must not contain newlines (they are replaced).
void emit(const std::string& event, const std::string& fields = {}) {
  std::string line = event;
  if (!fields.empty()) line += " " + fields;
  for (auto& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  line += " t=" + std::to_string(mono_us()) + "\n";
  std::lock_guard lock(g_out_mu);
  std::fwrite(line.data(), 1, line.size(), stdout);
  std::fflush(stdout);
}

std::string hex(std::int64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

struct Args {
  std::string connect;
  std::string lock;
  std::string name = "worker";
  std::string db;
  std::string commands;
  std::string key = "story";
  int session_timeout_ms = 2000;
  int connect_timeout_ms = 10000;
  int acquire_timeout_ms = 0;
  bool strict = false;
  int waiters = 0;
  int hold_ms = 0;
  bool loop = false;
  int writes = 2;
};

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "zklock_story_worker: " << problem << "\n"
            << "usage: zklock_story_worker --connect HOSTS --lock PATH [--name N] [--db PATH]\n"
            << "  [--session-timeout MS] [--acquire-timeout MS] [--policy tolerant|strict]\n"
            << "  (--commands FIFO | --waiters N [--hold-ms MS] | --loop [--key K] [--writes N] [--hold-ms MS])\n";
  std::exit(64);
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string k = argv[i];
    auto val = [&]() -> std::string {
      if (i + 1 >= argc) usage("missing value for " + k);
      return argv[++i];
    };
    if (k == "--connect") a.connect = val();
    else if (k == "--lock") a.lock = val();
    else if (k == "--name") a.name = val();
    else if (k == "--db") a.db = val();
    else if (k == "--commands") a.commands = val();
    else if (k == "--key") a.key = val();
    else if (k == "--session-timeout") a.session_timeout_ms = std::stoi(val());
    else if (k == "--connect-timeout") a.connect_timeout_ms = std::stoi(val());
    else if (k == "--acquire-timeout") a.acquire_timeout_ms = std::stoi(val());
    else if (k == "--policy") {
      auto p = val();
      if (p != "tolerant" && p != "strict") usage("bad policy " + p);
      a.strict = p == "strict";
    } else if (k == "--waiters") a.waiters = std::stoi(val());
    else if (k == "--hold-ms") a.hold_ms = std::stoi(val());
    else if (k == "--loop") a.loop = true;
    else if (k == "--writes") a.writes = std::stoi(val());
    else usage("unknown argument " + k);
  }
  if (a.connect.empty() || a.lock.empty()) usage("--connect and --lock are required");
  return a;
}

struct WriteOutcome {
  int rc = -1;
  std::string message;  // the store's stderr, first line
};

// Runs `fenced-store --db DB put KEY VALUE --token T [--fence F]`, capturing stderr.
WriteOutcome store_put(const std::string& db, const std::string& key, const std::string& value,
                       const std::string& token, const std::string& fence = {}) {
  int err_pipe[2];
  if (::pipe2(err_pipe, O_CLOEXEC) != 0) return {-1, std::string("pipe: ") + std::strerror(errno)};
  posix_spawn_file_actions_t fa;
  posix_spawn_file_actions_init(&fa);
  posix_spawn_file_actions_adddup2(&fa, err_pipe[1], 2);
  posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
  std::vector<std::string> args = {FENCED_STORE_BIN, "--db", db, "put", key, value, "--token", token};
  if (!fence.empty()) {
    args.push_back("--fence");
    args.push_back(fence);
  }
  std::vector<char*> argv;
  for (auto& s : args) argv.push_back(s.data());
  argv.push_back(nullptr);
  pid_t pid = -1;
  int rc = ::posix_spawn(&pid, FENCED_STORE_BIN, &fa, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&fa);
  ::close(err_pipe[1]);
  if (rc != 0) {
    ::close(err_pipe[0]);
    return {-1, std::string("spawn fenced-store: ") + std::strerror(rc)};
  }
  std::string err;
  char buf[1024];
  while (true) {
    ssize_t n = ::read(err_pipe[0], buf, sizeof buf);
    if (n > 0) err.append(buf, static_cast<std::size_t>(n));
    else if (n == 0 || errno != EINTR) break;
  }
  ::close(err_pipe[0]);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  WriteOutcome out;
  out.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  out.message = err.substr(0, err.find('\n'));
  return out;
}

long rss_kb() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::strtol(line.c_str() + 6, nullptr, 10);
  }
  return -1;
}

// The outcome slot of one asynchronous acquisition.
struct Slot {
  int idx = 0;
  std::stop_source stop;
  std::mutex mu;
  zklock::Lease lease;  // GUARDED_BY(mu)
  bool done = false;    // GUARDED_BY(mu)
  bool failed = false;  // GUARDED_BY(mu): done without a grant (a released slot has no lease either)
};

class Worker {
 public:
  explicit Worker(Args args) : args_(std::move(args)) {
    zklock::ClientOptions opts;
    opts.connect = args_.connect;
    opts.session_timeout = std::chrono::milliseconds(args_.session_timeout_ms);
    opts.connect_timeout = std::chrono::milliseconds(args_.connect_timeout_ms);
    opts.owner_prefix = args_.name;
    opts.zk_log_level = spdlog::level::off;
    client_ = std::make_unique<zklock::Client>(opts);
    client_->add_listener([this](zklock::ConnectionState s) {
      emit("state", "s=" + std::string(zklock::state_name(s)) + " session=" + hex(client_->session_id()) +
                        " epoch=" + std::to_string(client_->session_epoch()));
    });
    mutex_ = std::make_unique<zklock::FairMutex>(
        *client_, args_.lock,
        zklock::MutexOptions{.loss_policy = args_.strict ? zklock::LossPolicy::strict : zklock::LossPolicy::tolerant});
    emit("ready", "session=" + hex(client_->session_id()) +
                      " timeout=" + std::to_string(client_->negotiated_timeout().count()) +
                      " pid=" + std::to_string(::getpid()));
  }

  // Starts acquisition number `idx`; `granted` (optional) runs on the
  // callback thread after the grant is reported.
  std::shared_ptr<Slot> start_acquire(int idx, std::function<void(std::shared_ptr<Slot>)> granted = {}) {
    auto slot = std::make_shared<Slot>();
    slot->idx = idx;
    zklock::AcquireOptions ao;
    ao.owner = args_.name + "/" + std::to_string(idx);
    ao.description = "story worker " + args_.name;
    mutex_->acquire_async(
        [this, slot, granted](zklock::AcquireResult r) {
          if (r.error) {
            emit("acquire_failed", "idx=" + std::to_string(slot->idx) + " code=" +
                                       std::string(zklock::errc_name(r.error->code())) + " msg=" + r.error->what());
            std::lock_guard lock(slot->mu);
            slot->done = true;
            slot->failed = true;
            return;
          }
          // Under the slot's mutex, so a command answering "acquired" finds
          // the lease, and a release waits until on_lost is registered.
          {
            std::lock_guard lock(slot->mu);
            slot->lease = std::move(r.lease);
            slot->done = true;
            emit("acquired", "idx=" + std::to_string(slot->idx) + " token=" + slot->lease.token().str() +
                                 " node=" + slot->lease.node_path() + " session=" + hex(client_->session_id()));
            slot->lease.on_lost([idx = slot->idx](zklock::LossReason why, const std::string& detail) {
              emit("lost", "idx=" + std::to_string(idx) + " reason=" +
                               std::string(zklock::loss_reason_name(why)) + " detail=" + detail);
            });
          }
          if (granted) granted(slot);
        },
        ao, std::chrono::milliseconds(args_.acquire_timeout_ms), slot->stop.get_token());
    return slot;
  }

  int run_commands() {
    int fd = ::open(args_.commands.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
      emit("fatal", "msg=open " + args_.commands + ": " + std::strerror(errno));
      return 1;
    }
    std::shared_ptr<Slot> current;
    std::string buffer;
    char buf[512];
    while (true) {
      auto nl = buffer.find('\n');
      if (nl == std::string::npos) {
        ssize_t n = ::read(fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;  // the test closed the FIFO
        buffer.append(buf, static_cast<std::size_t>(n));
        continue;
      }
      std::string line = buffer.substr(0, nl);
      buffer.erase(0, nl + 1);
      std::istringstream in(line);
      std::string cmd;
      in >> cmd;
      if (cmd == "acquire") {
        current = start_acquire(next_idx_++);
      } else if (cmd == "cancel") {
        if (current) current->stop.request_stop();
        emit("cancelled");
      } else if (cmd == "check") {
        check(current);
      } else if (cmd == "write") {
        std::string key, value, fence;
        in >> key >> value >> fence;
        write(current, key, value, fence);
      } else if (cmd == "release") {
        release(current);
      } else if (cmd == "rss") {
        emit("rss", "kb=" + std::to_string(rss_kb()));
      } else if (cmd == "exit") {
        break;
      } else if (!cmd.empty()) {
        emit("error", "msg=unknown command " + cmd);
      }
    }
    ::close(fd);
    release(current);
    emit("exiting");
    return 0;
  }

  int run_waiters() {
    std::mutex mu;
    std::condition_variable cv;
    std::deque<std::shared_ptr<Slot>> granted;
    std::vector<std::shared_ptr<Slot>> slots;
    for (int i = 0; i < args_.waiters; ++i) {
      slots.push_back(start_acquire(i, [&](std::shared_ptr<Slot> s) {
        std::lock_guard lock(mu);
        granted.push_back(std::move(s));
        cv.notify_one();
      }));
    }
    emit("queued", "n=" + std::to_string(args_.waiters) + " rss_kb=" + std::to_string(rss_kb()));
    int finished = 0;
    while (finished < args_.waiters) {
      std::shared_ptr<Slot> s;
      {
        std::unique_lock lock(mu);
        // Failed acquisitions are not pushed; count them by polling the slots.
        if (!cv.wait_for(lock, 200ms, [&] { return !granted.empty(); })) {
          int failed = 0;
          for (auto& sl : slots) {
            std::lock_guard l2(sl->mu);
            if (sl->failed) ++failed;
          }
          if (failed + finished >= args_.waiters) break;
          continue;
        }
        s = std::move(granted.front());
        granted.pop_front();
      }
      if (args_.hold_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(args_.hold_ms));
      release(s);
      ++finished;
    }
    emit("rss", "kb=" + std::to_string(rss_kb()));
    emit("exiting", "released=" + std::to_string(finished));
    return 0;
  }

  int run_loop() {
    static std::atomic<bool> stop{false};
    ::signal(SIGTERM, [](int) { stop = true; });
    for (int round = 0; !stop; ++round) {
      std::mutex mu;
      std::condition_variable cv;
      bool done = false;
      auto slot = start_acquire(round, [&](std::shared_ptr<Slot>) {
        std::lock_guard lock(mu);
        done = true;
        cv.notify_one();
      });
      {
        std::unique_lock lock(mu);
        // A failed acquisition does not call back `granted`; poll the slot.
        while (!done && !stop) {
          cv.wait_for(lock, 100ms);
          std::lock_guard l2(slot->mu);
          if (slot->done) break;
        }
      }
      bool held;
      {
        std::lock_guard l2(slot->mu);
        held = static_cast<bool>(slot->lease);
      }
      if (!held) {
        slot->stop.request_stop();
        std::this_thread::sleep_for(50ms);
        continue;
      }
      const std::string token = slot->lease.token().str();
      for (int w = 0; w < args_.writes && !stop; ++w) {
        if (w > 0) std::this_thread::sleep_for(std::chrono::milliseconds(args_.hold_ms));
        write_with(slot->lease, token, args_.key, args_.name + ":" + std::to_string(round) + ":" + std::to_string(w));
      }
      release(slot);
    }
    emit("exiting");
    return 0;
  }

 private:
  void check(const std::shared_ptr<Slot>& s) {
    std::string fields;
    if (!s || !s->lease) {
      fields = "valid=0 suspended=0 loss=none held=0";
    } else {
      // valid() first: on resume from a freeze this is the very first call.
      const bool valid = s->lease.valid();
      const bool susp = s->lease.suspended();
      auto loss = s->lease.loss_reason();
      fields = std::string("valid=") + (valid ? "1" : "0") + " suspended=" + (susp ? "1" : "0") +
               " loss=" + (loss ? std::string(zklock::loss_reason_name(*loss)) : "none") + " held=1";
    }
    emit("check", fields + " session=" + hex(client_->session_id()) +
                      " epoch=" + std::to_string(client_->session_epoch()) +
                      " state=" + std::string(zklock::state_name(client_->state())));
  }

  void write(const std::shared_ptr<Slot>& s, const std::string& key, const std::string& value,
             const std::string& fence = {}) {
    if (!s || !s->lease) {
      emit("write", "key=" + key + " value=" + value + " token=none valid_before=0 rc=-1 msg=no lease");
      return;
    }
    write_with(s->lease, s->lease.token().str(), key, value, fence);
  }

  void write_with(const zklock::Lease& lease, const std::string& token, const std::string& key,
                  const std::string& value, const std::string& fence = {}) {
    // valid() is read before the write is issued and reported with it; the
    // write goes out regardless, so the store's verdict is what is tested.
    const bool valid = lease.valid();
    auto out = store_put(args_.db, key, value, token, fence);
    emit("write", "key=" + key + " value=" + value + " token=" + token +
                      " valid_before=" + (valid ? "1" : "0") + " rc=" + std::to_string(out.rc) +
                      " msg=" + out.message);
  }

  void release(const std::shared_ptr<Slot>& s) {
    if (!s) return;
    zklock::Lease lease;
    {
      std::lock_guard lock(s->mu);
      if (!s->lease) return;
      lease = std::move(s->lease);
    }
    emit("releasing", "idx=" + std::to_string(s->idx) + " token=" + lease.token().str());
    lease.release();
    emit("released", "idx=" + std::to_string(s->idx));
  }

  Args args_;
  std::unique_ptr<zklock::Client> client_;
  std::unique_ptr<zklock::FairMutex> mutex_;
  int next_idx_ = 0;
};

}  // namespace

int main(int argc, char** argv) {
  Args args = parse_args(argc, argv);
  ::signal(SIGPIPE, SIG_IGN);
  // stdout is the event channel: the library's log goes to stderr.
  spdlog::set_default_logger(spdlog::stderr_color_mt("story-worker"));
  spdlog::set_level(spdlog::level::warn);
  try {
    Worker w(args);
    if (args.waiters > 0) return w.run_waiters();
    if (args.loop) return w.run_loop();
    if (!args.commands.empty()) return w.run_commands();
    usage("one of --commands, --waiters, --loop is required");
  } catch (const zklock::Error& e) {
    emit("fatal", "code=" + std::string(zklock::errc_name(e.code())) + " msg=" + e.what());
    return 1;
  } catch (const std::exception& e) {
    emit("fatal", std::string("msg=") + e.what());
    return 1;
  }
}
