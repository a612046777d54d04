// Memory figures of a process from /proc/<pid>/status, for the tests' and
// the test worker's bounds on resident memory.
#pragma once

#include <sys/types.h>

#include <fstream>
#include <string>

namespace zklock::test {

// A field of /proc/<pid>/status in kB ("VmRSS": resident now, "VmHWM": peak
// resident), or -1 when it cannot be read. pid 0: this process.
inline long proc_status_kb(const std::string& field, pid_t pid = 0) {
  std::ifstream in("/proc/" + (pid == 0 ? std::string("self") : std::to_string(pid)) + "/status");
  std::string key;
  long value = -1;
  while (in >> key) {
    if (key == field + ":") {
      in >> value;
      return value;
    }
    in.ignore(1 << 12, '\n');
  }
  return -1;
}

// This process's resident set size in kB, or -1.
inline long rss_kb() { return proc_status_kb("VmRSS"); }

}  // namespace zklock::test
