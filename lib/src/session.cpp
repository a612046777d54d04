// The session of zklock::Client: connecting, state events, expiry and replacement, and shutdown.
#include <unistd.h>

#include <cstring>
#include <optional>

#include "attempt_tables.hpp"
#include "client_impl.hpp"
#include "zk_log.hpp"

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

std::string hostname() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "localhost";
  return buf;
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
      owner_prefix(opts.owner_prefix.empty() ? hostname() + "/" + std::to_string(getpid()) : opts.owner_prefix),
      attempt_tables(std::make_shared<detail::AttemptTables>()),
      acl_(opts),
      // Timer tasks run as zklock callbacks of the current session (of none
      // while closing), so synchronous calls refuse there.
      executor_(log, [this](const Executor::Task& task, bool draining) {
        CallbackScope scope(draining ? 0 : epoch_.load());
        task();
      }) {}

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

void Client::Impl::start() {
  set_zk_c_logger(log);
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
  const bool up = state_cv_.wait_for(lk, opts.connect_timeout, [&] { return has_session_; });
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
    if (h != handle_.get()) return;
  }
  h->connection.fetch_add(1);  // before any answer on a new connection (see Handle)
  std::optional<ConnectionState> public_state;
  SessionEvent ev{};
  if (zstate == ZOO_CONNECTED_STATE) {
    const bool again = h->connected_once;
    h->connected_once = true;
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
      // Until the first heartbeat answers, the session provably lives from
      // the moment we asked for it: the leader created it after that.
      std::lock_guard bl(bound_mu_);
      const auto vu = h->started + negotiated() - margin();
      valid_until_.store(vu.time_since_epoch().count());
      schedule_at(vu, [this, ep] { check_validity(ep); });
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
  } else if (zstate == ZOO_CONNECTING_STATE || zstate == ZOO_ASSOCIATING_STATE) {
    std::lock_guard lk(mu_);
    if (!has_session_ || state_ == ConnectionState::suspended || state_ == ConnectionState::lost) return;
    state_ = ConnectionState::suspended;
    public_state = state_;
    ev = SessionEvent::suspended;
  } else if (zstate == ZOO_EXPIRED_SESSION_STATE || zstate == ZOO_AUTH_FAILED_STATE) {
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
    else log->warn("zookeeper session 0x{:x} expired", session_id());
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
