#include "cli/common.hpp"

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include <CLI/CLI.hpp>
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include "zklock/path.hpp"
#include "zklock/protocol/node_name.hpp"

namespace zklock::cli {

using std::chrono::milliseconds;

std::string exit_code_help() {
  return "Exit codes:\n"
         "  0   success (exec: CMD's own status, or 128+N if CMD died of signal N)\n"
         "  1   any other failure (e.g. no permission)\n"
         "  64  usage error (bad option, argument, duration or path)\n"
         "  66  no such lock or path\n"
         "  69  ZooKeeper unavailable (not reachable within --connect-timeout)\n"
         "  73  deadlock victim: the detector (or an operator) revoked this wait\n"
         "  74  lock lost while CMD ran (CMD was terminated)\n"
         "  75  timed out waiting for the lock\n";
}

CliError::CliError(int exit_code, std::string message)
    : std::runtime_error(std::move(message)), exit_code_(exit_code) {}

int exit_code_for(Errc code) noexcept {
  // Unavailable: what error.hpp calls transient or session-fatal, plus an
  // ensemble without quorum and a failed TLS handshake (neither is either
  // class, but to the user ZooKeeper is just as unreachable).
  if (is_transient(code) || is_session_fatal(code) || code == Errc::new_config_no_quorum ||
      code == Errc::ssl_connection_error) {
    return exit_code::unavailable;
  }
  // A few codes have a documented exit code of their own; the rest are failures.
  if (code == Errc::invalid_argument || code == Errc::bad_arguments) return exit_code::usage;
  if (code == Errc::no_node) return exit_code::no_such;
  if (code == Errc::deadlock_victim) return exit_code::deadlock_victim;
  if (code == Errc::timeout) return exit_code::timeout;
  return exit_code::failure;
}

void add_global_options(CLI::App& app, GlobalOptions& g) {
  app.add_option("--zk", g.zk, "ZooKeeper connect string host:port[,host:port...][/chroot]")
      ->envname("ZKLOCK_ZK")
      ->capture_default_str();
  app.add_option("--root", g.root, "Root of the lock tree; relative LOCK and PATH arguments start here")
      ->envname("ZKLOCK_ROOT")
      ->capture_default_str();
  app.add_flag("--json", g.json, "Machine-readable output (schemas in docs/cli.md)");
  app.add_option("--connect-timeout", g.connect_timeout, "How long to wait for ZooKeeper before failing (exit 69)")
      ->capture_default_str();
  app.add_option("--session-timeout", g.session_timeout, "Requested ZooKeeper session timeout")
      ->capture_default_str();
  app.add_option("--auth,--digest", g.digest, "Digest credentials USER:PASSWORD (as zklock-detector's --auth)")
      ->envname("ZKLOCK_AUTH");
  app.add_flag("-v,--verbose", g.verbose, "Log the library's and the ZooKeeper client's messages on stderr");
}

// --- durations ---------------------------------------------------------------

milliseconds parse_duration(std::string_view text) {
  auto bad = [&](const char* why) -> CliError {
    return CliError(exit_code::usage, "invalid duration '" + std::string(text.substr(0, 64)) + "': " + why +
                                          " (write e.g. 500ms, 5s, 2m, 1h, or a number of seconds)");
  };
  std::size_t digits = 0;
  bool dot = false;
  while (digits < text.size() && (std::isdigit(static_cast<unsigned char>(text[digits])) || text[digits] == '.')) {
    if (text[digits] == '.') {
      if (dot) throw bad("more than one '.'");
      dot = true;
    }
    ++digits;
  }
  if (digits == 0) throw bad(text.empty() ? "empty" : "must start with a non-negative number");
  const std::string number(text.substr(0, digits));
  if (number == ".") throw bad("no digits");
  const std::string_view unit = text.substr(digits);
  double scale = 0;  // milliseconds per unit
  if (unit.empty() || unit == "s") scale = 1000;
  else if (unit == "ms") scale = 1;
  else if (unit == "m") scale = 60'000;
  else if (unit == "h") scale = 3'600'000;
  else throw bad("unknown unit (use ms, s, m or h)");
  char* end = nullptr;
  const double value = std::strtod(number.c_str(), &end);
  if (end != number.c_str() + number.size() || !std::isfinite(value)) throw bad("not a number");
  const double ms = value * scale;
  if (ms > 365.0 * 24 * 3'600'000) throw bad("longer than a year");
  return milliseconds(static_cast<std::int64_t>(std::llround(ms)));
}

std::string format_duration(milliseconds d) {
  const auto ms = d.count();
  if (ms != 0 && ms % 3'600'000 == 0) return std::to_string(ms / 3'600'000) + "h";
  if (ms != 0 && ms % 60'000 == 0) return std::to_string(ms / 60'000) + "m";
  if (ms % 1000 == 0) return std::to_string(ms / 1000) + "s";
  return std::to_string(ms) + "ms";
}

// --- paths -------------------------------------------------------------------

void validate_path(std::string_view path) {
  try {
    zklock::validate_path_syntax(path, "path");
  } catch (const zklock::Error& e) {
    throw CliError(exit_code::usage, e.what());
  }
}

std::string resolve_path(std::string_view arg, std::string_view root) {
  if (arg.empty()) throw CliError(exit_code::usage, "empty path");
  if (arg.front() == '/') {
    validate_path(arg);
    return std::string(arg);
  }
  try {
    validate_path(root);
  } catch (const CliError& e) {
    throw CliError(exit_code::usage, std::string("--root: ") + e.what());
  }
  // Validate the relative part on its own so the message names what the user typed.
  if (arg.back() == '/') {
    throw CliError(exit_code::usage, "invalid path '" + std::string(arg.substr(0, 200)) + "': trailing '/'");
  }
  const std::string joined = join_path(root, arg);
  try {
    validate_path(joined);
  } catch (const CliError& e) {
    const std::string why = e.what();
    const auto colon = why.find("': ");
    throw CliError(exit_code::usage, "invalid path '" + std::string(arg.substr(0, 200)) + "'" +
                                         (colon == std::string::npos ? "" : why.substr(colon + 1)));
  }
  return joined;
}

std::string resolve_lock_path(std::string_view arg, std::string_view root) {
  std::string path = resolve_path(arg, root);
  try {
    validate_lock_path(path);
  } catch (const Error& e) {
    throw CliError(exit_code::usage, e.what());
  }
  return path;
}

// --- output helpers ------------------------------------------------------------

std::string humanize_age(milliseconds age) {
  auto ms = age.count();
  if (ms < 0) ms = 0;
  char buf[32];
  if (ms < 1000) {
    if (ms == 0) return "0s";
    std::snprintf(buf, sizeof buf, "%lldms", static_cast<long long>(ms));
  } else if (ms < 60'000) {
    std::snprintf(buf, sizeof buf, "%llds", static_cast<long long>(ms / 1000));
  } else if (ms < 3'600'000) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", static_cast<long long>(ms / 60'000),
                  static_cast<long long>(ms / 1000 % 60));
  } else if (ms < 86'400'000) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", static_cast<long long>(ms / 3'600'000),
                  static_cast<long long>(ms / 60'000 % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lldd%02lldh", static_cast<long long>(ms / 86'400'000),
                  static_cast<long long>(ms / 3'600'000 % 24));
  }
  return buf;
}

std::string session_hex(std::int64_t session_id) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(session_id));
  return buf;
}

Table::Table(std::vector<std::string> headers) : headers_(std::move(headers)) {}

void Table::add_row(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

std::string Table::render() const {
  std::vector<std::size_t> width(headers_.size(), 0);
  auto measure = [&](const std::vector<std::string>& row) {
    for (std::size_t i = 0; i < row.size(); ++i) width[i] = std::max(width[i], row[i].size());
  };
  measure(headers_);
  for (const auto& r : rows_) measure(r);
  std::string out;
  auto emit = [&](const std::vector<std::string>& row) {
    std::string line;
    for (std::size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line += std::string(width[i] - row[i].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    out += line + "\n";
  };
  emit(headers_);
  for (const auto& r : rows_) emit(r);
  return out;
}

// --- the session -----------------------------------------------------------------

ClientOptions client_options(const GlobalOptions& g) {
  ClientOptions o;
  o.connect = g.zk;
  o.connect_timeout = parse_duration(g.connect_timeout);
  o.session_timeout = parse_duration(g.session_timeout);
  if (o.connect_timeout <= milliseconds::zero()) {
    throw CliError(exit_code::usage, "--connect-timeout must be positive");
  }
  if (o.session_timeout <= milliseconds::zero()) {
    throw CliError(exit_code::usage, "--session-timeout must be positive");
  }
  if (!g.digest.empty()) {
    const auto colon = g.digest.find(':');
    if (colon == std::string::npos || colon == 0) {
      throw CliError(exit_code::usage, "--auth must be USER:PASSWORD");
    }
    o.credentials = DigestCredentials{g.digest.substr(0, colon), g.digest.substr(colon + 1)};
  }
  o.zk_log_level = g.verbose ? zklock::LogLevel::info : zklock::LogLevel::error;
  return o;
}

std::unique_ptr<Client> connect(const GlobalOptions& g) {
  ClientOptions o = client_options(g);
  // Logs go to stderr (stdout carries the output, possibly JSON) and only
  // with --verbose: errors reach the user once, through main().
  static const bool configured = [&] {
    auto log = spdlog::stderr_color_mt("zklock-cli");
    log->set_level(g.verbose ? spdlog::level::debug : spdlog::level::off);
    spdlog::set_default_logger(log);
    return true;
  }();
  (void)configured;
  try {
    return std::make_unique<Client>(o);
  } catch (const Error& e) {
    if (e.code() == Errc::connect_timeout) {
      throw CliError(exit_code::unavailable,
                     "ZooKeeper at " + g.zk + " not reachable within " + format_duration(o.connect_timeout));
    }
    if (e.code() == Errc::invalid_argument) throw CliError(exit_code::usage, std::string("--zk: ") + e.what());
    throw CliError(exit_code_for(e.code()), std::string("cannot open a ZooKeeper session: ") + e.what());
  }
}

std::int64_t now_ms() {
  return std::chrono::duration_cast<milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void require_lock_before_separator(const std::vector<std::string>& args, std::size_t positionals) {
  const auto sep = std::find(args.begin(), args.end(), "--");
  if (sep == args.end()) return;
  // Everything after the first "--" is a positional (LOCK or CMD).
  const auto after = static_cast<std::size_t>(args.end() - sep - 1);
  if (positionals <= after) {
    throw CliError(exit_code::usage, "exec: LOCK must come before '--' (zklock exec LOCK [options] -- CMD [ARGS...])");
  }
}

}  // namespace zklock::cli
