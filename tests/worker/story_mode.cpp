// zklock_test_worker story: one real lock client for the failure stories,
// driven by commands, as N waiters, or in a loop (tests/loss, tests/faults).
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
// Three ways to drive it:
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
//      write-token TOKEN KEY VALUE
//                       write VALUE with TOKEN and no lease (valid_before=0):
//                       a late write with a token the process kept
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
// ZKLOCK_WORKER_LOG=debug (any spdlog level) sets the library's log level on
// stderr (warn by default): how a story that failed is read afterwards.
//
// Writes go through the real fenced-store binary (FENCED_STORE_BIN), spawned
// per write with --db; its exit code and its one stderr line are reported
// (story_client.cpp).
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <iostream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "proc_status.hpp"
#include "story_client.hpp"
#include "worker.hpp"
#include "zklock/error.hpp"

namespace zklock::test_worker {
namespace {

using namespace std::chrono_literals;
using test::rss_kb;

[[noreturn]] void usage(const std::string& problem) {
  std::cerr << "zklock_test_worker story: " << problem << "\n"
            << "usage: zklock_test_worker story --connect HOSTS --lock PATH [--name N] [--db PATH]\n"
            << "  [--session-timeout MS] [--acquire-timeout MS] [--retain-ms MS] [--wait-check-ms MS]\n"
            << "  [--policy tolerant|strict]\n"
            << "  (--commands FIFO | --waiters N [--hold-ms MS] | --loop [--key K] [--writes N] [--hold-ms MS])\n";
  std::exit(64);
}

StoryArgs parse_args(int argc, char** argv) {
  StoryArgs a;
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
    else if (k == "--retain-ms") a.retain_ms = std::stoi(val());
    else if (k == "--wait-check-ms") a.wait_check_ms = std::stoi(val());
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

int run_commands(StoryClient& client) {
  int fd = ::open(client.args().commands.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    emit("fatal", "msg=open " + client.args().commands + ": " + std::strerror(errno));
    return 1;
  }
  std::shared_ptr<Slot> current;
  int next_idx = 0;
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
      current = client.start_acquire(next_idx++);
    } else if (cmd == "cancel") {
      if (current) current->stop.request_stop();
      emit("cancelled");
    } else if (cmd == "check") {
      client.check(current);
    } else if (cmd == "write") {
      std::string key, value, fence;
      in >> key >> value >> fence;
      client.write(current, key, value, fence);
    } else if (cmd == "write-token") {
      std::string token, key, value;
      in >> token >> key >> value;
      client.write_with(zklock::Lease(), token, key, value);
    } else if (cmd == "release") {
      client.release(current);
    } else if (cmd == "rss") {
      emit("rss", "kb=" + std::to_string(rss_kb()));
    } else if (cmd == "exit") {
      break;
    } else if (!cmd.empty()) {
      emit("error", "msg=unknown command " + cmd);
    }
  }
  ::close(fd);
  client.release(current);
  emit("exiting");
  return 0;
}

int run_waiters(StoryClient& client) {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::shared_ptr<Slot>> granted;
  std::vector<std::shared_ptr<Slot>> slots;
  for (int i = 0; i < client.args().waiters; ++i) {
    slots.push_back(client.start_acquire(i, [&](std::shared_ptr<Slot> s) {
      std::lock_guard lock(mu);
      granted.push_back(std::move(s));
      cv.notify_one();
    }));
  }
  emit("queued", "n=" + std::to_string(client.args().waiters) + " rss_kb=" + std::to_string(rss_kb()));
  int finished = 0;
  while (finished < client.args().waiters) {
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
        if (failed + finished >= client.args().waiters) break;
        continue;
      }
      s = std::move(granted.front());
      granted.pop_front();
    }
    if (client.args().hold_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(client.args().hold_ms));
    client.release(s);
    ++finished;
  }
  emit("rss", "kb=" + std::to_string(rss_kb()));
  emit("exiting", "released=" + std::to_string(finished));
  return 0;
}

int run_loop(StoryClient& client) {
  static std::atomic<bool> stop{false};
  ::signal(SIGTERM, [](int) { stop = true; });
  for (int round = 0; !stop; ++round) {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    auto slot = client.start_acquire(round, [&](std::shared_ptr<Slot>) {
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
    for (int w = 0; w < client.args().writes && !stop; ++w) {
      if (w > 0) std::this_thread::sleep_for(std::chrono::milliseconds(client.args().hold_ms));
      client.write_with(slot->lease, token, client.args().key,
                        client.args().name + ":" + std::to_string(round) + ":" + std::to_string(w));
    }
    client.release(slot);
  }
  emit("exiting");
  return 0;
}

}  // namespace

int run_story(int argc, char** argv) {
  const StoryArgs args = parse_args(argc, argv);
  try {
    StoryClient client(args);
    if (args.waiters > 0) return run_waiters(client);
    if (args.loop) return run_loop(client);
    if (!args.commands.empty()) return run_commands(client);
    usage("one of --commands, --waiters, --loop is required");
  } catch (const zklock::Error& e) {
    emit("fatal", "code=" + std::string(zklock::errc_name(e.code())) + " msg=" + e.what());
    return 1;
  } catch (const std::exception& e) {
    emit("fatal", std::string("msg=") + e.what());
    return 1;
  }
}

}  // namespace zklock::test_worker
