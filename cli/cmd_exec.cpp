// zklock exec LOCK [--timeout D] [--owner ID] -- CMD [ARGS...]: run CMD
// while holding the lock (the flock(1) / `etcdctl lock` pattern).
//
// The story of one run:
//   1. INT, TERM, HUP and CHLD are blocked before the ZooKeeper client
//      starts its threads (they inherit the mask) and read from a signalfd,
//      so no signal is ever handled asynchronously.
//   2. The lock is requested asynchronously; the main thread polls the
//      signalfd and an eventfd the library's callbacks poke. A signal while
//      waiting cancels the wait (our node is deleted) and exits 128+N.
//   3. Once granted, CMD is spawned with ZKLOCK_TOKEN, ZKLOCK_LOCK and
//      ZKLOCK_OWNER in its environment and the signal mask and dispositions
//      reset. INT/TERM/HUP sent to us are forwarded to CMD.
//   4. If the lease is lost (revoked, session expired, validity ran out),
//      CMD gets SIGTERM, then SIGKILL after --grace; we exit 74.
//   5. When CMD ends, the lease is released and CMD's status (or 128+N for
//      signal N) is ours.
// Every wait is bounded or ends with CMD, which SIGKILL ends.
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/eventfd.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <mutex>
#include <optional>

#include <CLI/CLI.hpp>

#include "commands.hpp"
#include "zklock/fair_mutex.hpp"
#include "zklock/shared_mutex.hpp"
#include "zklock/protocol/revocation.hpp"

extern char** environ;

namespace zklock::cli {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

struct ExecOptions {
  std::string lock;
  bool shared = false;
  std::string timeout;  // empty: wait indefinitely
  std::string owner;
  std::string grace = "10s";
  std::vector<std::string> command;
  std::size_t raw_args = 0;  // how many arguments followed "exec" on the command line
};

// Blocks INT, TERM, HUP and CHLD in the calling thread (and every thread it
// starts later) and delivers them through a signalfd. Restores the mask on
// destruction.
class SignalChannel {
 public:
  SignalChannel() {
    sigemptyset(&set_);
    for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&set_, s);
    if (pthread_sigmask(SIG_BLOCK, &set_, &old_) != 0) throw CliError(exit_code::failure, "cannot block signals");
    fd_ = signalfd(-1, &set_, SFD_NONBLOCK | SFD_CLOEXEC);
    if (fd_ < 0) {
      pthread_sigmask(SIG_SETMASK, &old_, nullptr);
      throw CliError(exit_code::failure, std::string("signalfd: ") + std::strerror(errno));
    }
  }
  ~SignalChannel() {
    ::close(fd_);
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }
  SignalChannel(const SignalChannel&) = delete;
  SignalChannel& operator=(const SignalChannel&) = delete;

  int fd() const noexcept { return fd_; }
  // The next pending signal, if any.
  std::optional<int> next() {
    signalfd_siginfo info{};
    const auto n = ::read(fd_, &info, sizeof info);
    if (n != static_cast<ssize_t>(sizeof info)) return std::nullopt;
    return static_cast<int>(info.ssi_signo);
  }

 private:
  sigset_t set_{};
  sigset_t old_{};
  int fd_ = -1;
};

// What the library's callbacks hand to the main thread. Shared with them,
// so a late callback only touches this object.
struct ExecState {
  ExecState() : efd(eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) {
    if (efd < 0) throw CliError(exit_code::failure, std::string("eventfd: ") + std::strerror(errno));
  }
  ~ExecState() { ::close(efd); }
  void notify() noexcept {
    const std::uint64_t one = 1;
    [[maybe_unused]] auto n = ::write(efd, &one, sizeof one);
  }
  void drain() noexcept {
    std::uint64_t v;
    [[maybe_unused]] auto n = ::read(efd, &v, sizeof v);
  }

  const int efd;
  std::mutex mu;
  std::optional<AcquireResult> result;  // GUARDED_BY(mu)
  bool lost = false;                    // GUARDED_BY(mu)
  std::string loss;                     // GUARDED_BY(mu): "revoked: <detail>"
};

// Waits until the signalfd or the eventfd is readable, or `timeout` (negative: none).
void wait_events(const SignalChannel& sig, const ExecState& st, int timeout_ms) {
  pollfd fds[2] = {{sig.fd(), POLLIN, 0}, {st.efd, POLLIN, 0}};
  while (::poll(fds, 2, timeout_ms) < 0 && errno == EINTR) {
  }
}

int remaining_ms(SteadyClock::time_point deadline) {
  const auto left = std::chrono::duration_cast<milliseconds>(deadline - SteadyClock::now()).count();
  return static_cast<int>(std::clamp<std::int64_t>(left, 0, 1'000'000));
}

// CMD's environment: ours, with the three ZKLOCK_ variables set.
std::vector<std::string> child_environment(const std::string& token, const std::string& lock, const std::string& owner) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string_view v(*e);
    if (v.starts_with("ZKLOCK_TOKEN=") || v.starts_with("ZKLOCK_LOCK=") || v.starts_with("ZKLOCK_OWNER=")) continue;
    env.emplace_back(v);
  }
  env.push_back("ZKLOCK_TOKEN=" + token);
  env.push_back("ZKLOCK_LOCK=" + lock);
  env.push_back("ZKLOCK_OWNER=" + owner);
  return env;
}

// Starts CMD with a clean signal mask and default dispositions. Throws
// CliError(127) when CMD is not found, CliError(126) when it cannot run.
pid_t spawn_command(const std::vector<std::string>& command, const std::vector<std::string>& env) {
  std::vector<char*> argv, envp;
  for (const auto& a : command) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  for (const auto& e : env) envp.push_back(const_cast<char*>(e.c_str()));
  envp.push_back(nullptr);

  posix_spawnattr_t attr;
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : {SIGINT, SIGTERM, SIGHUP, SIGCHLD, SIGPIPE, SIGQUIT}) sigaddset(&defaults, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = -1;
  const int rc = posix_spawnp(&pid, argv[0], nullptr, &attr, argv.data(), envp.data());
  posix_spawnattr_destroy(&attr);
  if (rc != 0) {
    throw CliError(rc == ENOENT ? 127 : 126, "cannot run '" + command.front() + "': " + std::strerror(rc));
  }
  return pid;
}

int status_of(int wstatus) {
  if (WIFEXITED(wstatus)) return WEXITSTATUS(wstatus);
  if (WIFSIGNALED(wstatus)) return 128 + WTERMSIG(wstatus);
  return exit_code::failure;
}

// A revocation explained in one line. The library's text may embed the raw
// revocation record (JSON); then it is rendered with revocation_message() so
// the line carries the cycle (or the operator's reason) as text.
std::string readable_detail(const std::string& text) {
  const auto brace = text.find('{');
  if (brace != std::string::npos) {
    if (auto record = protocol::decode_revocation_record(std::string_view(text).substr(brace))) {
      return protocol::revocation_message(*record);
    }
  }
  return text;
}

std::string victim_detail(const Error& e) { return readable_detail(e.what()); }

bool is_forwarded(int sig) { return sig == SIGINT || sig == SIGTERM || sig == SIGHUP; }

int run_exec(const Context& ctx, const ExecOptions& o) {
  const GlobalOptions& g = ctx.global;
  // Input first: usage errors never wait for ZooKeeper.
  if (o.raw_args <= ctx.args.size()) {
    require_lock_before_separator({ctx.args.end() - static_cast<std::ptrdiff_t>(o.raw_args), ctx.args.end()},
                                  1 + o.command.size());
  }
  const std::string lock_path = resolve_lock_path(o.lock, g.root);
  std::optional<milliseconds> timeout;
  if (!o.timeout.empty()) timeout = std::max(parse_duration(o.timeout), milliseconds(1));
  const milliseconds grace = parse_duration(o.grace);
  if (o.command.empty()) throw CliError(exit_code::usage, "exec: missing CMD (zklock exec LOCK -- CMD [ARGS...])");
  SignalChannel signals;  // before the client starts its threads
  auto client = connect(g);
  std::string owner = o.owner;
  if (owner.empty()) {
    const char* env_owner = std::getenv("ZKLOCK_OWNER");
    owner = env_owner != nullptr && *env_owner != '\0' ? env_owner : client->owner_prefix();
  }

  // --- wait for the lock ---
  auto st = std::make_shared<ExecState>();
  std::stop_source cancel;
  AcquireOptions acquire;
  acquire.owner = owner;
  acquire.description = "zklock exec " + o.command.front();
  AcquireCallback on_result = [st](AcquireResult r) {
    {
      std::lock_guard lk(st->mu);
      st->result = std::move(r);
    }
    st->notify();
  };
  if (o.shared) {
    FairSharedMutex(*client, lock_path)
        .acquire_shared_async(std::move(on_result), acquire, timeout.value_or(milliseconds::zero()), cancel.get_token());
  } else {
    FairMutex(*client, lock_path)
        .acquire_async(std::move(on_result), acquire, timeout.value_or(milliseconds::zero()), cancel.get_token());
  }

  int interrupted = 0;  // the signal that cancelled the wait
  // (a plain time_point: GCC 12 misreports std::optional<time_point> as maybe-uninitialized)
  SteadyClock::time_point give_up_at = SteadyClock::time_point::max();
  AcquireResult result;
  for (;;) {
    {
      std::lock_guard lk(st->mu);
      if (st->result) {
        result = std::move(*st->result);
        break;
      }
    }
    if (SteadyClock::now() >= give_up_at) {
      throw CliError(128 + interrupted, "interrupted while waiting for " + lock_path);
    }
    wait_events(signals, *st, give_up_at == SteadyClock::time_point::max() ? -1 : remaining_ms(give_up_at));
    st->drain();
    while (auto sig = signals.next()) {
      if (is_forwarded(*sig) && interrupted == 0) {
        interrupted = *sig;
        cancel.request_stop();
        // The library answers a cancelled wait at once; this only bounds a
        // bug. Leaving without the answer is safe: closing the session
        // deletes our ephemeral node.
        give_up_at = SteadyClock::now() + std::min<milliseconds>(client->options().session_timeout, std::chrono::seconds(3));
      }
    }
  }
  if (result.error) {
    const Error& e = *result.error;
    if (interrupted != 0) throw CliError(128 + interrupted, "interrupted while waiting for " + lock_path);
    // Two codes get their own message; every other one passes through.
    if (e.code() == Errc::timeout) {
      throw CliError(exit_code::timeout, "timed out after " + format_duration(*timeout) + " waiting for " + lock_path);
    }
    if (e.code() == Errc::deadlock_victim) {
      throw CliError(exit_code::deadlock_victim, "deadlock victim waiting for " + lock_path + ": " + victim_detail(e));
    }
    throw e;
  }
  Lease lease = std::move(result.lease);
  if (interrupted != 0) {
    lease.release();
    throw CliError(128 + interrupted, "interrupted while waiting for " + lock_path);
  }

  // --- run CMD under the lease ---
  lease.on_lost([st](LossReason reason, const std::string& detail) {
    {
      std::lock_guard lk(st->mu);
      st->lost = true;
      const std::string name(loss_reason_name(reason));
      const std::string text = readable_detail(detail);
      st->loss = text.empty() ? name : text.starts_with(name) ? text : name + ": " + text;
    }
    st->notify();
  });
  const pid_t pid = spawn_command(o.command, child_environment(lease.token().str(), lock_path, owner));

  bool lost = false;
  std::string loss;
  constexpr auto never = SteadyClock::time_point::max();
  SteadyClock::time_point kill_at = never;
  int wstatus = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &wstatus, WNOHANG);
    if (r == pid || (r < 0 && errno == ECHILD)) break;
    if (!lost) {
      std::lock_guard lk(st->mu);
      if (st->lost) {
        lost = true;
        loss = st->loss;
      }
      if (lost) {
        ::kill(pid, SIGTERM);
        kill_at = SteadyClock::now() + grace;
      }
    }
    if (kill_at != never && SteadyClock::now() >= kill_at) {
      ::kill(pid, SIGKILL);
      kill_at = never;
    }
    wait_events(signals, *st, kill_at != never ? remaining_ms(kill_at) : -1);
    st->drain();
    while (auto sig = signals.next()) {
      if (is_forwarded(*sig)) ::kill(pid, *sig);
    }
  }
  lease.release();
  if (lost) {
    throw CliError(exit_code::lock_lost, "lock " + lock_path + " lost while CMD ran (" + loss +
                                             "); CMD was terminated (" +
                                             (WIFSIGNALED(wstatus) ? "signal " + std::to_string(WTERMSIG(wstatus))
                                                                   : "exit " + std::to_string(WEXITSTATUS(wstatus))) +
                                             ")");
  }
  return status_of(wstatus);
}

}  // namespace

void set_exec_command(CLI::App* app, Context& ctx) {
  auto opts = std::make_shared<ExecOptions>();
  auto* sub = app->add_subcommand("exec", "Run CMD while holding LOCK (zklock exec LOCK [options] -- CMD [ARGS...])");
  sub->footer(
      "CMD sees ZKLOCK_TOKEN (fencing token), ZKLOCK_LOCK (absolute lock path) and "
      "ZKLOCK_OWNER. Exits with CMD's status (128+N if killed by signal N), 75 on timeout, 73 as deadlock victim, "
      "74 if the lock was lost while CMD ran (CMD gets SIGTERM, then SIGKILL after --grace). INT, TERM and HUP are "
      "forwarded to CMD.");
  sub->add_option("lock", opts->lock, "The lock (absolute, or relative to --root); it comes before '--'")->required();
  sub->add_option("command", opts->command, "CMD [ARGS...]; put it after '--' when it has options")->required();
  sub->add_flag("--shared", opts->shared, "Take the lock in shared mode (a reader: many may hold it at once)");
  sub->add_option("--timeout", opts->timeout, "Give up (exit 75) if not granted within D; default: wait indefinitely");
  sub->add_option("--owner", opts->owner,
                  "Owner id for the wait-for graph; default: $ZKLOCK_OWNER, else <host>/<pid> (exported to CMD)");
  sub->add_option("--grace", opts->grace, "After a lost lock: time between SIGTERM and SIGKILL to CMD")
      ->capture_default_str();
  sub->preparse_callback([opts](std::size_t remaining) { opts->raw_args = remaining; });
  sub->callback([&ctx, opts] { ctx.exit_status = run_exec(ctx, *opts); });
}

}  // namespace zklock::cli
