// The session of zklock::Client: connecting, state events, expiry and replacement, and shutdown.
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <optional>
#include <sstream>

#include "attempt_tables.hpp"
#include "client_impl.hpp"
#include "connect_string.hpp"
#include "session_pool.hpp"
#include "zk_log.hpp"
#include "zklock/protocol/host.hpp"

namespace zklock {
namespace {

thread_local std::uint64_t tl_callback_epoch = 0;
thread_local bool tl_in_callback = false;

void global_watcher(zhandle_t*, int type, int state, const char*, void* ctx) noexcept {
  if (type != ZOO_SESSION_EVENT || ctx == nullptr) return;
  auto* h = static_cast<Handle*>(ctx);
  try {
    CallbackScope scope(h->epoch);
    h->impl->on_session_event(h, state);
  } catch (const std::exception& e) {
    h->impl->log->error("session event handler failed: {}", e.what());
  } catch (...) {
    h->impl->log->error("session event handler failed with a non-standard exception");
  }
}

// One four-letter word to host:port, its whole answer, within `timeout`; or
// nothing (refused, timed out, or closed without a word).
std::optional<std::string> four_letter_word(const std::string& host, const std::string& port, const char* word,
                                            std::chrono::milliseconds timeout) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr) return std::nullopt;
  std::unique_ptr<addrinfo, void (*)(addrinfo*)> owned(res, freeaddrinfo);
  const int fd = socket(res->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  struct Closer {
    int fd;
    ~Closer() { close(fd); }
  } closer{fd};
  const auto deadline = Clock::now() + timeout;
  auto wait = [&](short events) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now()).count();
    pollfd p{fd, events, 0};
    return left > 0 && poll(&p, 1, static_cast<int>(left)) == 1;
  };
  if (connect(fd, res->ai_addr, res->ai_addrlen) != 0 && (errno != EINPROGRESS || !wait(POLLOUT))) return std::nullopt;
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) return std::nullopt;
  if (send(fd, word, std::strlen(word), MSG_NOSIGNAL) != static_cast<ssize_t>(std::strlen(word))) return std::nullopt;
  std::string out;
  char buf[4096];
  while (wait(POLLIN)) {
    const ssize_t n = recv(fd, buf, sizeof buf, 0);
    if (n <= 0) break;
    out.append(buf, static_cast<std::size_t>(n));
  }
  if (out.empty()) return std::nullopt;
  return out;
}

// "key=value" lines of a `conf` answer; -1 where absent.
std::int64_t conf_value(const std::string& conf, const std::string& key) {
  std::istringstream in(conf);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + "=", 0) != 0) continue;
    try {
      return std::stoll(line.substr(key.size() + 1));
    } catch (const std::exception&) {
      return -1;
    }
  }
  return -1;
}

std::shared_ptr<spdlog::logger> client_logger(const std::string& name) {
  auto log = spdlog::get(name);
  if (!log) {
    log = spdlog::default_logger()->clone(name);
    spdlog::register_logger(log);  // may race with another client: harmless
  }
  return log;
}

}  // namespace

CallbackScope::CallbackScope(std::uint64_t epoch) : prev_epoch(tl_callback_epoch), prev_in(tl_in_callback) {
  tl_callback_epoch = epoch;
  tl_in_callback = true;
}
CallbackScope::~CallbackScope() {
  tl_callback_epoch = prev_epoch;
  tl_in_callback = prev_in;
}

std::uint64_t Client::Impl::callback_epoch() noexcept { return tl_callback_epoch; }
bool Client::Impl::in_callback() noexcept { return tl_in_callback; }

Client::Impl::Impl(ClientOptions o)
    : log(client_logger(o.logger)),
      opts(std::move(o)),
      owner_prefix(opts.owner_prefix.empty() ? protocol::host_and_pid() : opts.owner_prefix),
      attempt_tables(std::make_shared<detail::AttemptTables>()),
      shards(std::make_unique<detail::SessionShards>()),
      acl_(opts),
      // Timer tasks run as zklock callbacks of the current session (of none
      // while closing), so synchronous calls refuse there.
      executor_(log, [this](const Executor::Task& task, bool draining) {
        CallbackScope scope(draining ? 0 : epoch_.load());
        task();
      }) {}

Client::Impl::Impl(const Impl& primary, std::uint32_t index)
    : log(primary.log),
      opts(primary.opts),
      owner_prefix(primary.owner_prefix),
      attempt_tables(primary.attempt_tables),
      acl_(opts),
      executor_(log, [this](const Executor::Task& task, bool draining) {
        CallbackScope scope(draining ? 0 : epoch_.load());
        task();
      }) {
  settings_ = primary.settings_;
  settings_given_ = true;
  epoch_.store(std::uint64_t{index} << 32);
}

Client::Impl::~Impl() { shutdown(); }

std::unique_ptr<Handle> Client::Impl::open_handle() {
  auto h = std::make_unique<Handle>(this, epoch_.load() + 1);
  zoo_set_debug_level(to_zoo_level(opts.zk_log_level));
  errno = 0;
  h->zh.reset(zookeeper_init2(opts.connect.c_str(), global_watcher,
                              static_cast<int>(opts.session_timeout.count()), nullptr, h.get(), 0,
                              zk_log_callback));
  if (h->zh == nullptr) {
    const int err = errno;
    throw Error(Errc::invalid_argument, "cannot start a ZooKeeper session for '" + opts.connect +
                                            "': " + std::strerror(err));
  }
  zoo_set_servers_resolution_delay(h->zh.get(), static_cast<int>(opts.resolution_delay.count()));
  if (opts.credentials) {
    const std::string cert = opts.credentials->user + ":" + opts.credentials->password;
    zoo_add_auth(h->zh.get(), "digest", cert.data(), static_cast<int>(cert.size()), nullptr, nullptr);
  }
  return h;
}

// The bound's proof needs the ensemble's tickTime (validity_rule.hpp: the
// leader's ping gap). Given, or read with `conf` from the first server of the
// connect string that answers it (4lw.commands.whitelist must include conf;
// every member is assumed to share it). Neither: the bound assumes the
// largest tickTime the default minSessionTimeout (2 × tickTime) allows for
// the negotiated timeout, and says so (docs/design.md, the assumptions).
void Client::Impl::read_server_settings() {
  if (opts.server_tick_time > 0ms) {
    settings_.tick = opts.server_tick_time;
    return;
  }
  const auto budget = std::min<std::chrono::milliseconds>(opts.connect_timeout / 4, 1000ms);
  const auto deadline = Clock::now() + budget;
  for (const auto& hp : connect_members(opts.connect)) {
    if (Clock::now() >= deadline) break;
    const auto hostport = host_and_port(hp);
    if (!hostport) continue;
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
    const auto conf = four_letter_word(hostport->first, hostport->second, "conf", std::min(left, 500ms));
    if (!conf || conf_value(*conf, "tickTime") <= 0) continue;
    settings_.tick = std::chrono::milliseconds(conf_value(*conf, "tickTime"));
    settings_.min_session = std::chrono::milliseconds(conf_value(*conf, "minSessionTimeout"));
    settings_.max_session = std::chrono::milliseconds(conf_value(*conf, "maxSessionTimeout"));
    settings_.sync_limit = static_cast<int>(conf_value(*conf, "syncLimit"));
    settings_.read = true;
    return;
  }
}

bool Client::Impl::validity_params(detail::ValidityParams* out) {
  const auto timeout = negotiated();
  out->timeout = timeout;
  out->margin = margin();
  out->tick = settings_.tick > 0ms ? settings_.tick : timeout / 2;
  if (settings_.read) {
    log->debug("zookeeper servers' conf: tickTime {} ms, minSessionTimeout {} ms, maxSessionTimeout {} ms, syncLimit {}",
               settings_.tick.count(), settings_.min_session.count(), settings_.max_session.count(),
               settings_.sync_limit);
  }
  if (settings_.tick <= 0ms) {
    log->warn("zookeeper session 0x{:x}: the servers' tickTime is unknown (`conf` not answered: add it to "
              "4lw.commands.whitelist, or set ClientOptions::server_tick_time); the validity bound assumes "
              "tickTime <= {} ms, half the negotiated timeout, as minSessionTimeout's default ensures",
              session_id(), (timeout / 2).count());
  }
  if (!out->usable()) {
    log->error("zookeeper session 0x{:x}: timeout {} ms is too short to prove a validity bound with tickTime "
               "{} ms (timeout − margin must be at least 1.5 × tickTime): valid() stays false",
               session_id(), timeout.count(), std::chrono::duration_cast<std::chrono::milliseconds>(out->tick).count());
    return false;
  }
  return true;
}

void Client::Impl::start() {
  set_zk_c_logger(log);
  const auto began = Clock::now();
  if (!settings_given_) read_server_settings();  // its time counts against connect_timeout
  executor_.start();
  try {
    // Opened under the exclusive lock: the first session event may arrive
    // before zookeeper_init2 returns, and must find this handle current.
    std::unique_lock lk(handle_mu_);
    handle_ = open_handle();
    epoch_.store(handle_->epoch);
  } catch (...) {
    shutdown();
    throw;
  }
  std::unique_lock lk(mu_);
  const bool up = state_cv_.wait_until(lk, began + opts.connect_timeout, [&] { return has_session_; });
  const bool auth_failed = !up && state_ == ConnectionState::lost;
  lk.unlock();
  if (!up) {
    shutdown();
    auto secs = std::chrono::duration<double>(opts.connect_timeout).count();
    if (auth_failed) throw Error(Errc::auth_failed, "ZooKeeper rejected the credentials for " + opts.connect);
    throw Error(Errc::connect_timeout,
                fmt::format("could not connect to ZooKeeper at {} within {:g}s (no server answered)",
                            opts.connect, secs));
  }
}

void Client::Impl::shutdown() {
  // The other sessions first: their attempts' last callbacks may still be
  // posted to this session's callback thread (start_async).
  if (shards) shards->shutdown();
  if (closing_.exchange(true)) return;
  std::unique_ptr<Handle> h;
  {
    std::unique_lock lk(handle_mu_);
    h.swap(handle_);
  }
  h.reset();  // closes outside every lock (invariant 1)
  executor_.stop();
}

// Runs on the completion thread of `h`. Only the current handle's events count.
void Client::Impl::on_session_event(Handle* h, int zstate) {
  {
    std::shared_lock lk(handle_mu_);
    if (h != handle_.get() || h->abandoned.load()) return;
  }
  const auto count = h->connection.fetch_add(1) + 1;  // before any answer on a new connection (see Handle)
  // A connection closed: is the session looping (reconnect_loop.hpp)? Then it ends here, as if expired.
  const bool closed = zstate == ZOO_CONNECTING_STATE || zstate == ZOO_ASSOCIATING_STATE;
  const bool looping = closed && connection_closed(h);
  std::optional<ConnectionState> public_state;
  SessionEvent ev{};
  if (zstate == ZOO_CONNECTED_STATE) {
    const bool again = h->connected_once;
    h->connected_once = true;
    h->live_connection = count;
    h->live_since = Clock::now();
    {
      std::lock_guard lk(mu_);
      session_id_ = zoo_client_id(h->zh.get())->client_id;
      negotiated_ = std::chrono::milliseconds(zoo_recv_timeout(h->zh.get()));
      has_session_ = true;
      state_ = again ? ConnectionState::reconnected : ConnectionState::connected;
      public_state = state_;
    }
    const auto ep = h->epoch;
    if (!again) {
      // Until a chain of committed writes raises it, the session provably
      // lives from the moment we asked for it: the leader created it (and
      // gave it a full timeout) after that, and a later leader starts it
      // afresh later still. Unless the settings refuse any bound.
      detail::ValidityParams params;
      const bool usable = validity_params(&params);
      std::lock_guard bl(bound_mu_);
      rule_.reset(params);
      evidence_epoch_ = ep;
      validity_refused_ = !usable;
      heartbeat_period_.store(params.heartbeat_period().count());
      if (usable) {
        const auto vu = h->started + negotiated() - margin();
        valid_until_.store(vu.time_since_epoch().count());
        schedule_at(vu, [this, ep] { check_validity(ep); });
      }
    } else {
      // The same session is back, but if the bound passed meanwhile the
      // lease cannot be proven: report that first (once), then reconnected.
      std::lock_guard bl(bound_mu_);
      report_lapse_locked(ep);
    }
    ev = again ? SessionEvent::reconnected : SessionEvent::connected;
    log->info("zookeeper session 0x{:x} {} (timeout {} ms)", session_id(),
              again ? "reconnected" : "established", negotiated().count());
    // One heartbeat chain per connection: a reconnect starts a new one now.
    const auto gen = ++heartbeat_gen_;
    defer([this, ep, gen] { heartbeat(ep, gen); });
  } else if (closed && !looping) {
    std::lock_guard lk(mu_);
    if (!has_session_ || state_ == ConnectionState::suspended || state_ == ConnectionState::lost) return;
    state_ = ConnectionState::suspended;
    public_state = state_;
    ev = SessionEvent::suspended;
  } else if (zstate == ZOO_EXPIRED_SESSION_STATE || zstate == ZOO_AUTH_FAILED_STATE || looping) {
    {
      std::lock_guard lk(mu_);
      if (state_ == ConnectionState::lost) return;
      state_ = ConnectionState::lost;
      has_session_ = false;
      public_state = state_;
    }
    valid_until_.store(Clock::time_point::min().time_since_epoch().count());
    ev = SessionEvent::lost;
    if (zstate == ZOO_AUTH_FAILED_STATE) log->error("zookeeper authentication failed");
    else if (!looping) log->warn("zookeeper session 0x{:x} expired", session_id());
    if (!closing_) defer([this] { replace_session(); });
  } else {
    return;
  }
  // Snapshot listeners before waking the constructor: a listener added after
  // Client() returns must not hear about the session it connected with.
  std::vector<std::function<void(ConnectionState)>> ls;
  if (public_state) {
    std::lock_guard lk(mu_);
    for (auto& [id, fn] : listeners_) ls.push_back(fn);
  }
  state_cv_.notify_all();
  if (ev == SessionEvent::suspended) {
    log->warn("zookeeper connection lost; session 0x{:x} valid for {} ms more at most", session_id(),
              std::chrono::duration_cast<std::chrono::milliseconds>(valid_until() - Clock::now()).count());
  }
  emit(ev, h->epoch);
  if (public_state) {
    for (auto& fn : ls) post_user([fn, s = *public_state] { fn(s); });
  }
}

void Client::Impl::emit(SessionEvent ev, std::uint64_t epoch) {
  std::vector<std::function<void(SessionEvent, std::uint64_t)>> obs;
  {
    std::lock_guard lk(mu_);
    obs.reserve(observers_.size());
    for (auto& [id, fn] : observers_) obs.push_back(fn);
  }
  for (auto& fn : obs) fn(ev, epoch);
}

Client::Impl::ObserverId Client::Impl::observe(std::function<void(SessionEvent, std::uint64_t)> fn) {
  std::lock_guard lk(mu_);
  const auto id = next_observer_++;
  observers_.emplace(id, std::move(fn));
  return id;
}

void Client::Impl::unobserve(ObserverId id) {
  std::lock_guard lk(mu_);
  observers_.erase(id);
}

void Client::Impl::replace_session() {
  if (closing_) return;
  std::unique_ptr<Handle> old;  // destroyed last: closed outside every lock
  try {
    std::unique_lock lk(handle_mu_);  // see start(): events must find the new handle current
    old = std::exchange(handle_, open_handle());
    epoch_.store(handle_->epoch);
  } catch (const std::exception& e) {
    log->error("cannot start a new zookeeper session: {}; retrying in 1 s", e.what());
    schedule_at(Clock::now() + 1s, [this] { replace_session(); });
    return;
  }
  {
    std::lock_guard lk(mu_);
    ensemble_id_.clear();
  }
}

}  // namespace zklock
