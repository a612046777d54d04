// zklock_test_worker: the one child-process lock client of the tests; its
// modes (one per file) and what they share.
//
//   zklock_test_worker rounds  --zk HOST:PORT --lock PATH [...]   rounds_mode.cpp
//   zklock_test_worker story   --connect HOSTS --lock PATH [...]  story_mode.cpp
//   zklock_test_worker nemesis --connect HOSTS --lock PATH [...] nemesis_mode.cpp
//   zklock_test_worker multi|naive|stripes <connect> ...         pair_modes.cpp
//
// stdout carries the answers the tests parse, one line per event; the
// library's log goes to stderr. Each mode keeps its own line format and exit
// codes (see its file), because the tests parse exactly those.
#pragma once

#include <string>

namespace zklock::test_worker {

// Writes `line` and a newline to stdout as one write, then flushes: lines of
// different threads never interleave, and the test reads each line the
// moment it is printed.
void print_line(const std::string& line);

// Each mode gets its arguments without the program name: argv[0] is the mode.
int run_rounds(int argc, char** argv);
int run_story(int argc, char** argv);
int run_pair_mode(int argc, char** argv);
int run_nemesis(int argc, char** argv);

}  // namespace zklock::test_worker
