// What every `zklock` subcommand shares: global options, exit codes, input
// parsing (durations, paths), output helpers (tables, ages) and the mapping
// of zklock errors to exit codes. docs/cli.md is the user-facing contract;
// keep the two in step.
//
// Everything here except connect() is pure and unit-tested
// (tests/unit/cli_parse_test.cpp); it is built into zklock_cli_core.
//
// Error contract: subcommand code throws CliError (an exit code and a
// one-line message) or zklock::Error; main() is the only place that turns
// either into a message on stderr and an exit status.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "zklock/client.hpp"
#include "zklock/error.hpp"

namespace CLI {
class App;
}

namespace zklock::cli {

// The exit codes of every subcommand (sysexits.h values). `exec` passes
// CMD's own status through instead of `ok`.
namespace exit_code {
inline constexpr int ok = 0;
inline constexpr int failure = 1;           // anything not listed below (e.g. no permission)
inline constexpr int usage = 64;            // EX_USAGE: bad command line, malformed path
inline constexpr int no_such = 66;          // EX_NOINPUT: no such lock or path
inline constexpr int unavailable = 69;      // EX_UNAVAILABLE: ZooKeeper not reachable
inline constexpr int deadlock_victim = 73;  // the detector (or an operator) revoked our wait
inline constexpr int lock_lost = 74;        // the lease was lost while CMD ran
inline constexpr int timeout = 75;          // EX_TEMPFAIL: timed out waiting for the lock
}  // namespace exit_code

// The exit-code table as printed in --help and docs/cli.md.
std::string exit_code_help();

// A failure with the exit code it maps to. what() is one line, without the
// "zklock: " prefix main() adds.
class CliError : public std::runtime_error {
 public:
  CliError(int exit_code, std::string message);
  int exit_code() const noexcept { return exit_code_; }

 private:
  int exit_code_;
};

// The exit code for a zklock error: invalid_argument -> usage, no_node ->
// no_such, connection problems -> unavailable, deadlock_victim, timeout;
// everything else -> failure. (A lease lost while CMD runs is reported by
// zklock exec itself, as exit_code::lock_lost: a loss is a Lease event, not an Error.)
int exit_code_for(Errc code) noexcept;

struct GlobalOptions {
  std::string zk = "127.0.0.1:2181";  // --zk, env ZKLOCK_ZK
  std::string root = "/locks";        // --root, env ZKLOCK_ROOT
  bool json = false;                  // --json
  std::string connect_timeout = "5s";
  std::string session_timeout = "10s";
  std::string digest;                 // --auth (alias --digest) USER:PASSWORD, env ZKLOCK_AUTH
  bool verbose = false;               // -v: library logs on stderr
};

// Shared by the subcommands of one invocation. A subcommand callback sets
// `exit_status` when it does not end in ok (exec: CMD's status).
struct Context {
  GlobalOptions global;
  int exit_status = exit_code::ok;
  std::vector<std::string> args;  // argv[1..] as typed (empty when a test parses a string)
};

// zklock exec LOCK [options] -- CMD [ARGS...]: LOCK must come before "--".
// CLI11 fills positionals in order, so with none before "--" it would take
// CMD's first word as LOCK and run the rest as CMD. `args`: exec's own
// arguments as typed (everything after "exec"); `positionals`: how many
// CLI11 gave LOCK and CMD together. Throws CliError(usage) when none of them
// came before the first "--".
void require_lock_before_separator(const std::vector<std::string>& args, std::size_t positionals);

// Registers the global options on the top-level app.
void add_global_options(CLI::App& app, GlobalOptions& global);

// "500ms", "5s", "2m", "1h", or a bare non-negative number of seconds
// ("3", "0.5"). Throws CliError(usage) for anything else, negative values
// or values beyond a year.
std::chrono::milliseconds parse_duration(std::string_view text);
// The shortest exact spelling: "500ms", "5s", "2m", "1500ms".
std::string format_duration(std::chrono::milliseconds d);

// Checks an absolute ZooKeeper path: starts with '/', and unless it is "/"
// itself: no empty, "." or ".." component, no trailing '/', no control
// characters. Throws CliError(usage) naming the problem.
void validate_path(std::string_view path);

// A PATH or LOCK argument: absolute when it starts with '/', else relative
// to `root` ("x/y" under "/locks" is "/locks/x/y"). The result is validated
// (validate_path); so is the root. Throws CliError(usage).
std::string resolve_path(std::string_view arg, std::string_view root);
// As resolve_path, and the result must be a valid lock path
// (zklock::validate_lock_path: not "/", not under /zookeeper or /zklock).
std::string resolve_lock_path(std::string_view arg, std::string_view root);

// "0s", "850ms", "42s", "3m04s", "2h05m", "3d04h". Negative ages print as "0s".
std::string humanize_age(std::chrono::milliseconds age);

// "0x1008a2c3e6f0000" — a ZooKeeper session id as ZooKeeper prints it.
std::string session_hex(std::int64_t session_id);

// An aligned text table: columns separated by two spaces, headers first,
// the last column not padded. Cells must not contain newlines.
class Table {
 public:
  explicit Table(std::vector<std::string> headers);
  void add_row(std::vector<std::string> cells);  // missing cells render empty
  std::size_t rows() const noexcept { return rows_.size(); }
  std::string render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<std::vector<std::string>> rows_;
};

// ClientOptions from the global options (durations and credentials parsed).
// Throws CliError(usage).
ClientOptions client_options(const GlobalOptions& global);

// Opens the session. A server that does not answer within the connect
// timeout, a malformed connect string or failed authentication become a
// CliError (unavailable, usage, failure) with a one-line message.
std::unique_ptr<Client> connect(const GlobalOptions& global);

// Milliseconds since the Unix epoch (for ages against ZooKeeper ctimes).
std::int64_t now_ms();

}  // namespace zklock::cli
