// zklock_test_worker rounds: one real process contending for one FairMutex,
// a number of acquisitions in a row, checking exclusion and token order from
// inside the critical section (tests/order/queue_order_test.cpp).
//
// Usage:
//   zklock_test_worker rounds --zk HOST:PORT --lock /path [options]
//
//   --zk HOST:PORT      connect string (required)
//   --lock PATH         lock path (required)
//   --count N           acquisitions to make, one after another (default 1)
//   --owner ID          owner id (default: the client's host/pid/thread)
//   --hold-ms M         time spent inside the critical section (default 0)
//   --session-ms S      requested session timeout (default 4000)
//   --check-file F      mutual-exclusion check done by the critical section
//                       itself: create F with O_CREAT|O_EXCL on entry (EEXIST
//                       means another holder is inside: a violation), unlink
//                       it before releasing
//   --log-file F        append "<owner> <i> <czxid>\n" with one O_APPEND
//                       write() per grant, while holding the lock: the file
//                       is the global grant order of every worker sharing it
//   --go-file F         wait (at most 30 s) until F exists before the first
//                       acquire, so many workers can start contending at once
//
// Output on stdout, one line per event, flushed at once:
//   ready session=0x<id>
//   granted <i> <czxid> <token text>
//   released <i>
//   violation <what>          (then exits 1)
//   error <message>           (then exits 3)
//   done <count>
//
// Exit codes: 0 all acquisitions done and no violation; 1 violation (another
// holder was inside, a token did not increase, the lease was invalid inside
// the critical section); 2 usage; 3 a zklock or system error.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "zklock/client.hpp"
#include "zklock/fair_mutex.hpp"

#include "worker.hpp"

namespace zklock::test_worker {
namespace {

struct Args {
  std::string zk, lock, owner, check_file, log_file, go_file;
  int count = 1;
  int hold_ms = 0;
  int session_ms = 4000;
};

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "zklock_test_worker rounds: %s (see tests/worker/rounds_mode.cpp)\n", why.c_str());
  std::exit(2);
}

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    if (i + 1 >= argc) usage("missing value for " + k);
    const std::string v = argv[++i];
    try {
      if (k == "--zk") a.zk = v;
      else if (k == "--lock") a.lock = v;
      else if (k == "--owner") a.owner = v;
      else if (k == "--check-file") a.check_file = v;
      else if (k == "--log-file") a.log_file = v;
      else if (k == "--go-file") a.go_file = v;
      else if (k == "--count") a.count = std::stoi(v);
      else if (k == "--hold-ms") a.hold_ms = std::stoi(v);
      else if (k == "--session-ms") a.session_ms = std::stoi(v);
      else usage("unknown option " + k);
    } catch (const std::logic_error&) {
      usage("bad number for " + k + ": " + v);
    }
  }
  if (a.zk.empty() || a.lock.empty()) usage("--zk and --lock are required");
  if (a.count < 0 || a.hold_ms < 0 || a.session_ms <= 0) usage("negative count or time");
  return a;
}

[[noreturn]] void violation(const std::string& what) {
  print_line("violation " + what);
  std::exit(1);
}

}  // namespace

int run_rounds(int argc, char** argv) {
  const Args a = parse(argc, argv);
  try {
    zklock::Client client({.connect = a.zk, .session_timeout = std::chrono::milliseconds(a.session_ms)});
    zklock::FairMutex mutex(client, a.lock);
    char id[32];
    std::snprintf(id, sizeof id, "%llx", static_cast<unsigned long long>(client.session_id()));
    print_line(std::string("ready session=0x") + id);
    if (!a.go_file.empty()) {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
      struct stat st {};
      while (::stat(a.go_file.c_str(), &st) != 0) {
        if (std::chrono::steady_clock::now() > deadline) throw std::runtime_error("no go file within 30 s");
        std::this_thread::sleep_for(std::chrono::milliseconds(2));
      }
    }
    int log_fd = -1;
    if (!a.log_file.empty()) {
      log_fd = ::open(a.log_file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
      if (log_fd < 0) throw std::runtime_error("open " + a.log_file + ": " + std::strerror(errno));
    }
    std::int64_t last_czxid = 0;
    for (int i = 0; i < a.count; ++i) {
      zklock::AcquireOptions opts;
      opts.owner = a.owner;
      zklock::Lease lease = mutex.acquire(opts);
      const auto czxid = lease.token().czxid();
      if (!a.check_file.empty()) {
        const int fd = ::open(a.check_file.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0) {
          if (errno == EEXIST) violation("another holder is inside (" + a.check_file + " exists) at grant " +
                                         std::to_string(i) + " czxid " + std::to_string(czxid));
          throw std::runtime_error("open " + a.check_file + ": " + std::strerror(errno));
        }
        ::close(fd);
      }
      if (czxid <= last_czxid) violation("token did not increase: " + std::to_string(czxid) + " after " +
                                         std::to_string(last_czxid));
      last_czxid = czxid;
      if (log_fd >= 0) {
        const std::string rec = (a.owner.empty() ? lease.owner() : a.owner) + " " + std::to_string(i) + " " +
                                std::to_string(czxid) + "\n";
        if (::write(log_fd, rec.data(), rec.size()) != static_cast<ssize_t>(rec.size()))
          throw std::runtime_error("short write to " + a.log_file);
      }
      print_line("granted " + std::to_string(i) + " " + std::to_string(czxid) + " " + lease.token().str());
      if (a.hold_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(a.hold_ms));
      if (!lease.valid()) violation("lease invalid inside the critical section at grant " + std::to_string(i));
      if (!a.check_file.empty() && ::unlink(a.check_file.c_str()) != 0)
        violation("check file vanished while we held the lock: " + std::string(std::strerror(errno)));
      lease.release();
      print_line("released " + std::to_string(i));
    }
    if (log_fd >= 0) ::close(log_fd);
    print_line("done " + std::to_string(a.count));
    return 0;
  } catch (const std::exception& e) {
    print_line(std::string("error ") + e.what());
    return 3;
  }
}

}  // namespace zklock::test_worker
