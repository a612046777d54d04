// zklock-detector: finds owners that wait for each other in a cycle on
// zklock locks and breaks the cycle by revoking a victim. docs/detector.md.
#include <pthread.h>
#include <signal.h>

#include <charconv>
#include <fstream>
#include <iostream>
#include <thread>

#include <CLI/CLI.hpp>
#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include "detector/daemon.hpp"
#include "zklock/error.hpp"

namespace {

using zklock::detector::DetectorConfig;

// "500ms", "2s", "1m", "1h" -> milliseconds; nullopt for anything else.
std::optional<std::chrono::milliseconds> parse_duration(std::string_view text) {
  std::size_t digits = 0;
  while (digits < text.size() && text[digits] >= '0' && text[digits] <= '9') ++digits;
  if (digits == 0 || digits > 12) return std::nullopt;
  std::int64_t value = 0;
  std::from_chars(text.data(), text.data() + digits, value);
  const auto unit = text.substr(digits);
  if (unit == "ms") return std::chrono::milliseconds(value);
  if (unit == "s") return std::chrono::milliseconds(value * 1000);
  if (unit == "m") return std::chrono::milliseconds(value * 60'000);
  if (unit == "h") return std::chrono::milliseconds(value * 3'600'000);
  return std::nullopt;
}

const CLI::Validator kDuration(
    [](std::string& s) {
      return parse_duration(s) ? std::string() : "'" + s + "' is not a duration like 500ms, 2s, 1m or 1h";
    },
    "DURATION");

// Writes the log payload as a JSON string body (quotes, backslashes and
// control characters escaped), so --log-format json emits valid JSON lines.
class JsonEscapedMessage : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&, spdlog::memory_buf_t& dest) override {
    for (char c : std::string_view(msg.payload.data(), msg.payload.size())) {
      switch (c) {
        case '"': dest.append(std::string_view("\\\"")); break;
        case '\\': dest.append(std::string_view("\\\\")); break;
        case '\n': dest.append(std::string_view("\\n")); break;
        case '\t': dest.append(std::string_view("\\t")); break;
        default:
          if (static_cast<unsigned char>(c) < 0x20) {
            char buf[8];
            std::snprintf(buf, sizeof buf, "\\u%04x", c);
            dest.append(std::string_view(buf));
          } else {
            dest.push_back(c);
          }
      }
    }
  }
  std::unique_ptr<custom_flag_formatter> clone() const override { return std::make_unique<JsonEscapedMessage>(); }
};

std::shared_ptr<spdlog::logger> make_logger(const std::string& format, const std::string& level) {
  auto logger = std::make_shared<spdlog::logger>("zklock-detector", std::make_shared<spdlog::sinks::stderr_sink_mt>());
  if (format == "json") {
    auto f = std::make_unique<spdlog::pattern_formatter>();
    f->add_flag<JsonEscapedMessage>('*').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","logger":"%n","msg":"%*"})");
    logger->set_formatter(std::move(f));
  } else {
    logger->set_pattern("%Y-%m-%dT%H:%M:%S.%e%z %l %n: %v");
  }
  logger->set_level(spdlog::level::from_str(level));
  logger->flush_on(spdlog::level::info);
  spdlog::set_default_logger(logger);  // the library's "zklock" messages go the same way
  return logger;
}

std::optional<zklock::DigestCredentials> parse_credentials(const std::string& text) {
  const auto colon = text.find(':');
  if (colon == std::string::npos || colon == 0) return std::nullopt;
  return zklock::DigestCredentials{text.substr(0, colon), text.substr(colon + 1)};
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"zklock-detector: finds deadlock cycles among zklock lock owners and breaks them by revoking a victim"};
  app.set_config("--config", "", "Read any of these flags from a TOML/INI file (key = value)");

  DetectorConfig cfg;
  cfg.metrics_port = 9464;
  std::string interval = "1s", min_wait = "1s", session_timeout = "10s", resync = "1m", prune = "1m";
  std::string abandon_skew = "5s";
  std::string policy = "youngest", mode = "wait", log_format = "text", log_level = "info";
  std::string auth, auth_file;
  app.add_option("--zk", cfg.zk, "ZooKeeper connect string host:port[,host:port...][/chroot]")->capture_default_str();
  app.add_option("--root", cfg.root, "Mirror lock paths under this znode (any depth)")->capture_default_str();
  app.add_option("--interval", interval, "Periodic sweep: a scan runs at least this often")
      ->check(kDuration)->capture_default_str();
  app.add_option("--min-wait", min_wait, "Only waits older than this count (ordinary hand-offs are never touched)")
      ->check(kDuration)->capture_default_str();
  app.add_option("--abandon-skew", abandon_skew,
                 "Clock-skew allowance: a wait this long past its stated timeout is abandoned and closes no cycle")
      ->check(kDuration)->capture_default_str();
  app.add_option("--policy", policy, "Victim policy")
      ->check(CLI::IsMember(zklock::detector::policy_names()))->capture_default_str();
  app.add_option("--prefer-victim", cfg.policy.prefer,
                 "Owner glob ('*', '?') chosen as victim before others (repeatable)");
  app.add_option("--protect", cfg.policy.protect,
                 "Owner glob never chosen while another cycle member can be (repeatable)");
  app.add_option("--mode", mode, "wait: delete the victim's waiting node; all: also delete the nodes it holds")
      ->check(CLI::IsMember({"wait", "all"}))->capture_default_str();
  app.add_flag("--dry-run", cfg.dry_run, "Detect and report only; revoke nothing");
  app.add_option("--metrics-port", cfg.metrics_port,
                 "Port for /metrics, /healthz and the status page (/ and /api/state); 0 disables")
      ->check(CLI::Range(0, 65535))->capture_default_str();
  app.add_option("--metrics-host", cfg.metrics_host,
                 "Address the endpoint listens on (the status page shows owners, hosts and pids; "
                 "0.0.0.0 for a Prometheus elsewhere)")
      ->capture_default_str();
  app.add_option("--log-format", log_format, "Log lines as text or JSON")
      ->check(CLI::IsMember({"text", "json"}))->capture_default_str();
  app.add_option("--log-level", log_level, "trace, debug, info, warn, error")
      ->check(CLI::IsMember({"trace", "debug", "info", "warn", "error"}))->capture_default_str();
  app.add_option("--session-timeout", session_timeout, "ZooKeeper session timeout; a standby takes over within it")
      ->check(kDuration)->capture_default_str();
  app.add_option("--auth", auth, "Digest credentials user:password (prefer --auth-file: argv is visible to others)");
  app.add_option("--auth-file", auth_file, "File holding digest credentials user:password on its first line")
      ->check(CLI::ExistingFile);
  app.add_option("--id", cfg.id, "Detector id written into revocation records (default host/pid)");
  app.add_option("--keep-records", cfg.keep_records, "Revocation records kept under /zklock/revocations")
      ->capture_default_str();
  app.add_option("--prune-interval", prune, "How often the leader deletes revocation records beyond --keep-records")
      ->check(kDuration)->capture_default_str();
  app.add_option("--resync-interval", resync, "Full re-list of the mirrored tree (safety net)")
      ->check(kDuration)->capture_default_str();
  app.add_option("--max-children", cfg.max_children, "Directories with more children are logged and skipped")
      ->capture_default_str();
  app.add_option("--watch-budget-bytes", cfg.watch_budget_bytes,
                 "Watched path bytes per ZooKeeper session; the mirror opens more sessions beyond it "
                 "(keep it below the servers' jute.maxbuffer)")
      ->check(CLI::Range(std::size_t{1024}, std::size_t{1} << 30))->capture_default_str();
  app.add_option("--load-sessions", cfg.mirror_load_sessions,
                 "ZooKeeper sessions the mirror lists and watches through from the start; its load runs on "
                 "them in parallel")
      ->check(CLI::Range(std::size_t{1}, std::size_t{64}))->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  cfg.interval = *parse_duration(interval);
  cfg.min_wait = *parse_duration(min_wait);
  cfg.abandon_skew = *parse_duration(abandon_skew);
  cfg.session_timeout = *parse_duration(session_timeout);
  cfg.resync_interval = *parse_duration(resync);
  cfg.prune_interval = *parse_duration(prune);
  cfg.policy.policy = *zklock::detector::parse_policy(policy);
  cfg.mode = mode == "all" ? zklock::detector::RevocationMode::all : zklock::detector::RevocationMode::wait;
  if (!auth_file.empty()) {
    std::ifstream in(auth_file);
    std::getline(in, auth);
  }
  if (!auth.empty()) {
    cfg.credentials = parse_credentials(auth);
    if (!cfg.credentials) {
      std::cerr << "zklock-detector: credentials must look like user:password\n";
      return 2;
    }
  }
  cfg.log = make_logger(log_format, log_level);

  // Signals are taken by one thread with sigwait: no work in a handler.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  std::mutex mu;
  std::condition_variable cv;
  bool stopping = false;
  zklock::detector::Daemon* daemon = nullptr;
  std::thread signal_thread([&] {
    int sig = 0;
    sigwait(&signals, &sig);
    std::lock_guard lock(mu);
    cfg.log->info("signal {}: shutting down", sig == SIGTERM ? "SIGTERM" : "SIGINT");
    stopping = true;
    if (daemon) daemon->stop();
    cv.notify_all();
  });

  int rc = 0;
  try {
    for (;;) {
      std::unique_ptr<zklock::detector::Daemon> d;
      try {
        d = std::make_unique<zklock::detector::Daemon>(cfg);
      } catch (const zklock::Error& e) {
        // An outage at start-up (no server yet, a connection lost or a
        // session ended while setting up) is waited out like one later on;
        // anything else (a bad path, an auth or ACL error) is fatal.
        if (e.code() != zklock::Errc::connect_timeout && !zklock::is_transient(e) && !zklock::is_session_fatal(e)) {
          throw;
        }
        cfg.log->warn("cannot reach ZooKeeper at {}: {}; retrying", cfg.zk, e.what());
        std::unique_lock lock(mu);
        if (cv.wait_for(lock, std::chrono::seconds(2), [&] { return stopping; })) break;
        continue;
      }
      {
        std::lock_guard lock(mu);
        if (stopping) break;
        daemon = d.get();
      }
      d->run();
      std::lock_guard lock(mu);
      daemon = nullptr;
      break;
    }
  } catch (const std::exception& e) {
    cfg.log->critical("fatal: {}", e.what());
    rc = 1;
  }
  // Wake the signal thread if no signal came (fatal error path).
  {
    std::lock_guard lock(mu);
    if (!stopping) pthread_kill(signal_thread.native_handle(), SIGTERM);
  }
  signal_thread.join();
  return rc;
}
