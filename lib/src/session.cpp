// Session lifecycle of zklock::Client: connecting, state events, heartbeats,
// the validity bound, replacement after expiry, timers and the callback thread.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>

#include "client_impl.hpp"

namespace zklock {
namespace {

thread_local std::uint64_t tl_callback_epoch = 0;
thread_local bool tl_in_callback = false;

// The C client's log goes to spdlog. Its callback carries no context, so it
// uses one process-wide logger: set by every Client that starts, read by
// every C-client thread that logs (ThreadSanitizer caught the two racing).
std::mutex g_zk_logger_mu;
std::shared_ptr<spdlog::logger> g_zk_logger;  // GUARDED_BY(g_zk_logger_mu)

std::shared_ptr<spdlog::logger> zk_c_logger() {
  std::lock_guard lk(g_zk_logger_mu);
  return g_zk_logger;
}

void set_zk_c_logger(std::shared_ptr<spdlog::logger> logger) {
  std::lock_guard lk(g_zk_logger_mu);
  g_zk_logger = std::move(logger);
}

void zk_log_callback(const char* message) noexcept {
  try {
    auto logger = zk_c_logger();
    if (!logger) logger = spdlog::default_logger();
    // Messages look like "<time>:<pid>(<thread>):ZOO_WARN@func@123: text";
    // spdlog adds its own time, so keep the part from "ZOO_".
    const char* body = std::strstr(message, "ZOO_");
    std::string_view text = body ? body : message;
    spdlog::level::level_enum level = spdlog::level::debug;
    if (text.starts_with("ZOO_ERROR")) level = spdlog::level::err;
    else if (text.starts_with("ZOO_WARN")) level = spdlog::level::warn;
    else if (text.starts_with("ZOO_INFO")) level = spdlog::level::info;
    // While a server is down the C client retries every few milliseconds and
    // says the same thing each time: log a repeated line at most once a second.
    static std::mutex mu;
    static std::string last;
    static Clock::time_point last_at;
    static int repeats = 0;
    {
      std::lock_guard lk(mu);
      const auto now = Clock::now();
      const auto at = text.find(": ");
      const std::string_view key = at == std::string_view::npos ? text : text.substr(at);
      if (key == last && now - last_at < 1s) {
        ++repeats;
        return;
      }
      if (repeats > 0) logger->log(level, "zk: (previous message repeated {} times)", repeats);
      repeats = 0;
      last.assign(key);
      last_at = now;
    }
    logger->log(level, "zk: {}", text);
  } catch (...) {
  }
}

ZooLogLevel to_zoo_level(spdlog::level::level_enum l) {
  switch (l) {
    case spdlog::level::trace:
    case spdlog::level::debug: return ZOO_LOG_LEVEL_DEBUG;
    case spdlog::level::info: return ZOO_LOG_LEVEL_INFO;
    case spdlog::level::warn: return ZOO_LOG_LEVEL_WARN;
    default: return ZOO_LOG_LEVEL_ERROR;
  }
}

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

Client::Impl::Impl(ClientOptions o) : opts(std::move(o)) {
  log = spdlog::get(opts.logger);
  if (!log) {
    log = spdlog::default_logger()->clone(opts.logger);
    spdlog::register_logger(log);  // may race with another client: harmless
  }
  owner_prefix = opts.owner_prefix.empty() ? hostname() + "/" + std::to_string(getpid())
                                           : opts.owner_prefix;
  // The ACL strings must outlive every request that references them.
  if (!opts.acl.empty()) {
    for (const auto& e : opts.acl) {
      acl_strings_.push_back(e.scheme);
      acl_strings_.push_back(e.id);
    }
    for (std::size_t i = 0; i < opts.acl.size(); ++i) {
      ACL a{};
      a.perms = opts.acl[i].perms;
      a.id.scheme = acl_strings_[2 * i].data();
      a.id.id = acl_strings_[2 * i + 1].data();
      acl_entries_.push_back(a);
    }
    acl_vector_.count = static_cast<int32_t>(acl_entries_.size());
    acl_vector_.data = acl_entries_.data();
  } else if (opts.credentials) {
    acl_strings_ = {"auth", "", "world", "anyone"};
    acl_entries_.push_back(ACL{perm::all, {acl_strings_[0].data(), acl_strings_[1].data()}});
    acl_entries_.push_back(ACL{perm::read, {acl_strings_[2].data(), acl_strings_[3].data()}});
    acl_vector_.count = 2;
    acl_vector_.data = acl_entries_.data();
  } else {
    acl_vector_ = ZOO_OPEN_ACL_UNSAFE;
  }
}

Client::Impl::~Impl() { shutdown(); }

std::chrono::milliseconds Client::Impl::margin() const {
  if (opts.validity_margin > 0ms) return opts.validity_margin;
  std::lock_guard lk(mu_);
  return std::max<std::chrono::milliseconds>(negotiated_ / 10, 20ms);
}

Handle* Client::Impl::open_handle() {
  auto* h = new Handle;
  h->impl = this;
  h->epoch = epoch_.load() + 1;
  h->started = Clock::now();
  zoo_set_debug_level(to_zoo_level(opts.zk_log_level));
  errno = 0;
  h->zh = zookeeper_init2(opts.connect.c_str(), global_watcher,
                          static_cast<int>(opts.session_timeout.count()), nullptr, h, 0,
                          zk_log_callback);
  if (h->zh == nullptr) {
    const int err = errno;
    delete h;
    throw Error(Errc::invalid_argument, "cannot start a ZooKeeper session for '" + opts.connect +
                                            "': " + std::strerror(err));
  }
  zoo_set_servers_resolution_delay(h->zh, static_cast<int>(opts.resolution_delay.count()));
  if (opts.credentials) {
    const std::string cert = opts.credentials->user + ":" + opts.credentials->password;
    zoo_add_auth(h->zh, "digest", cert.data(), static_cast<int>(cert.size()), nullptr, nullptr);
  }
  return h;
}

void Client::Impl::start() {
  set_zk_c_logger(log);
  timer_thread_ = std::thread([this] { timer_loop(); });
  user_thread_ = std::thread([this] { callback_loop(); });
  try {
    // Opened under the exclusive lock: the first session event may arrive
    // before zookeeper_init2 returns, and must find this handle current.
    std::unique_lock lk(handle_mu_);
    Handle* h = open_handle();
    handle_ = h;
    epoch_.store(h->epoch);
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

void Client::Impl::close_handle(Handle* h) {
  if (h == nullptr) return;
  // May block (it sends closeSession); runs pending completions with ZCLOSING.
  zookeeper_close(h->zh);
  // Requests the C client dropped without completing them (still queued at
  // close) fail now, once each, with ZCLOSING.
  std::unordered_map<const void*, std::function<void()>> pending;
  {
    std::lock_guard lk(h->watches_mu);
    pending.swap(h->pending);
  }
  for (auto& [ctx, fail] : pending) {
    CallbackScope scope(h->epoch);
    fail();
  }
  {
    // Scoped: the guard must unlock before `h` (and its mutex) is deleted.
    std::lock_guard lk(h->watches_mu);
    for (WatchCtx* w : h->watches) free_watch_ctx(w);
    h->watches.clear();
  }
  delete h;
}

void Client::Impl::shutdown() {
  if (closing_.exchange(true)) return;
  Handle* h = nullptr;
  {
    std::unique_lock lk(handle_mu_);
    std::swap(h, handle_);
  }
  close_handle(h);
  {
    std::lock_guard lk(timer_mu_);
    timer_stop_ = true;
  }
  timer_cv_.notify_all();
  if (timer_thread_.joinable()) timer_thread_.join();
  {
    std::lock_guard lk(user_mu_);
    user_stop_ = true;
  }
  user_cv_.notify_all();
  if (user_thread_.joinable()) user_thread_.join();
}

// Runs on the completion thread of `h`. Only the current handle's events count.
void Client::Impl::on_session_event(Handle* h, int zstate) {
  {
    std::shared_lock lk(handle_mu_);
    if (h != handle_) return;
  }
  h->connection.fetch_add(1);  // before any answer on a new connection (see Handle)
  std::optional<ConnectionState> public_state;
  SessionEvent ev{};
  if (zstate == ZOO_CONNECTED_STATE) {
    const bool again = h->connected_once;
    h->connected_once = true;
    {
      std::lock_guard lk(mu_);
      session_id_ = zoo_client_id(h->zh)->client_id;
      negotiated_ = std::chrono::milliseconds(zoo_recv_timeout(h->zh));
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

std::chrono::milliseconds Client::Impl::heartbeat_period() const {
  return std::max<std::chrono::milliseconds>(negotiated() / 3, 10ms);
}

// The validity bound (docs/design.md, "Loss and the validity bound").
//
// The leader alone expires sessions, a full timeout after the last touch it
// received. Our server touches the session whenever we send it anything and
// hands its touches to the leader in its answer to each leader ping (every
// tickTime/2; tickTime <= timeout/2, so at least once per heartbeat period),
// on the same ordered stream that carries our requests to the leader.
//
// An answer the leader ordered (a write, or the read behind our sync) to a
// request sent at t proves the leader processed it after t without having
// closed the session. Alone, that does not keep the session alive: the touch
// of that request may still sit on our server. But take two such answers from
// the same server, the earlier sent at t1, the later at t2 >= t1 + period.
// The server touched the session for the first (at or after t1) before it
// forwarded the second; a leader ping fell in between, and the touch went to
// the leader ahead of the second request on that stream. The leader received
// the second request, so it received the touch: the session cannot expire
// before t1 + timeout. Hence the bound is t1 + timeout − margin, for the
// latest t1 with a later ordered answer at least a period after it.
//
// "The same server" is checked as "the same connection" (Handle::connection),
// which is stricter. When the connection changes, the old server's touches
// are no evidence about the new stream: the evidence starts over, and the
// bound stays where the old evidence put it until two answers on the new
// connection raise it. An answer that arrives after the connection changed
// (counts differ) was not sent on the current one and is no evidence.
void Client::Impl::note_ordered(Handle* h, Clock::time_point sent, std::uint64_t connection) {
  const auto period = heartbeat_period();
  const auto timeout = negotiated();
  const auto m = margin();
  std::lock_guard lk(bound_mu_);
  if (h->epoch != epoch_.load() || connection != h->connection.load()) return;
  if (connection != evidence_connection_ || evidence_epoch_ != h->epoch) {
    evidence_.clear();
    evidence_connection_ = connection;
    evidence_epoch_ = h->epoch;
  }
  std::optional<Clock::time_point> base;  // latest evidence a period before `sent`
  for (const auto t : evidence_) {
    if (t <= sent - period) base = t;
  }
  evidence_.insert(std::upper_bound(evidence_.begin(), evidence_.end(), sent), sent);
  // Older evidence than `base` can never be the latest again.
  while (base && evidence_.front() < *base) evidence_.pop_front();
  while (evidence_.size() > 64) evidence_.pop_front();
  if (!base) return;
  const auto candidate = (*base + timeout - m).time_since_epoch().count();
  if (candidate <= valid_until_.load()) return;
  // A bound that lapsed is reported before it is raised again (invariant 4).
  report_lapse_locked(h->epoch);
  valid_until_.store(candidate);
}

void Client::Impl::report_lapse_locked(std::uint64_t epoch) {
  const auto vu = valid_until_.load();
  if (closing_ || epoch != epoch_.load() || Clock::now().time_since_epoch().count() < vu) return;
  if (vu == lapse_reported_for_ || vu == Clock::time_point::min().time_since_epoch().count()) return;
  lapse_reported_for_ = vu;
  log->warn("zookeeper session 0x{:x}: validity bound passed {} ms ago without a leader-ordered answer",
            session_id(),
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - valid_until()).count());
  CallbackScope scope(epoch);
  emit(SessionEvent::validity_expired, epoch);
}

void Client::Impl::heartbeat(std::uint64_t epoch, std::uint64_t gen) {
  if (closing_ || epoch != epoch_.load() || gen != heartbeat_gen_.load()) return;
  if (connected()) {
    // One round trip: the read is pipelined behind the sync (sync_then_read).
    sync_then_read([](bool) {});
  }
  schedule_at(Clock::now() + heartbeat_period(), [this, epoch, gen] { heartbeat(epoch, gen); });
}

// Watches the bound for the whole session, connected or not: a bound can pass
// with the connection intact (a pause between timeout − margin and timeout,
// or a server that answers but whose leader does not). Runs at the bound;
// while the bound stays in the past it looks again every heartbeat period.
void Client::Impl::check_validity(std::uint64_t epoch) {
  if (closing_ || epoch != epoch_.load()) return;
  Clock::time_point next;
  {
    std::lock_guard lk(bound_mu_);
    report_lapse_locked(epoch);
    const auto vu = valid_until();
    next = Clock::now() < vu ? vu : Clock::now() + heartbeat_period();
  }
  schedule_at(next, [this, epoch] { check_validity(epoch); });
}

void Client::Impl::replace_session() {
  if (closing_) return;
  Handle* old = nullptr;
  try {
    std::unique_lock lk(handle_mu_);  // see start(): events must find the new handle current
    Handle* fresh = open_handle();
    old = handle_;
    handle_ = fresh;
    epoch_.store(fresh->epoch);
  } catch (const std::exception& e) {
    log->error("cannot start a new zookeeper session: {}; retrying in 1 s", e.what());
    schedule_at(Clock::now() + 1s, [this] { replace_session(); });
    return;
  }
  {
    std::lock_guard lk(mu_);
    ensemble_id_.clear();
  }
  close_handle(old);
}

Client::Impl::TimerId Client::Impl::schedule_at(Clock::time_point when, std::function<void()> fn) {
  std::lock_guard lk(timer_mu_);
  const auto id = next_timer_++;
  timers_.emplace(when, std::make_pair(id, std::move(fn)));
  timer_cv_.notify_one();
  return id;
}

void Client::Impl::cancel(TimerId id) {
  std::lock_guard lk(timer_mu_);
  for (auto it = timers_.begin(); it != timers_.end(); ++it) {
    if (it->second.first == id) {
      timers_.erase(it);
      return;
    }
  }
}

void Client::Impl::timer_loop() {
  std::unique_lock lk(timer_mu_);
  while (true) {
    if (timer_stop_) {
      // Run what is already due (deferred failure callbacks release waiters),
      // drop future timers. Bounded: tasks added while draining run once more.
      for (int round = 0; round < 4 && !timers_.empty(); ++round) {
        auto due = std::move(timers_);
        timers_.clear();
        lk.unlock();
        for (auto& [when, task] : due) {
          if (when == Clock::time_point::min()) {
            CallbackScope scope(0);
            try {
              task.second();
            } catch (const std::exception& e) {
              log->error("zklock timer task failed while closing: {}", e.what());
            } catch (...) {
              log->error("zklock timer task failed while closing with a non-standard exception");
            }
          }
        }
        lk.lock();
      }
      timers_.clear();
      return;
    }
    if (timers_.empty()) {
      timer_cv_.wait(lk);
      continue;
    }
    auto it = timers_.begin();
    if (it->first > Clock::now()) {
      // By value: cancel() may erase this entry while we wait, and
      // wait_until reads its deadline again after waking.
      const auto when = it->first;
      timer_cv_.wait_until(lk, when);
      continue;
    }
    auto task = std::move(it->second.second);
    timers_.erase(it);
    lk.unlock();
    {
      CallbackScope scope(epoch_.load());
      try {
        task();
      } catch (const std::exception& e) {
        log->error("zklock timer task failed: {}", e.what());
      } catch (...) {
        // A foreign exception (not derived from std::exception) must not end
        // this thread: every later timer, and every deferred callback, runs here.
        log->error("zklock timer task failed with a non-standard exception");
      }
    }
    lk.lock();
  }
}

void Client::Impl::post_user(std::function<void()> fn) {
  {
    std::lock_guard lk(user_mu_);
    if (user_stop_) return;
    user_queue_.push_back(std::move(fn));
  }
  user_cv_.notify_one();
}

void Client::Impl::callback_loop() {
  std::unique_lock lk(user_mu_);
  while (true) {
    user_cv_.wait(lk, [&] { return user_stop_ || !user_queue_.empty(); });
    if (user_queue_.empty()) return;  // stopping and drained
    auto fn = std::move(user_queue_.front());
    user_queue_.pop_front();
    lk.unlock();
    try {
      fn();
    } catch (const std::exception& e) {
      log->error("zklock user callback threw: {}", e.what());
    } catch (...) {
      log->error("zklock user callback threw a non-standard exception");
    }
    lk.lock();
  }
}

}  // namespace zklock
