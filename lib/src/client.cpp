// zklock::Client's public surface: forwarding to Impl, the synchronous twins, input validation.
#include "zklock/client.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <charconv>
#include <future>

#include "client_impl.hpp"
#include "digest.hpp"
#include "server_move.hpp"
#include "session_pool.hpp"
#include "zklock/path.hpp"

namespace zklock {

std::string_view state_name(ConnectionState s) noexcept {
  switch (s) {
    case ConnectionState::connected: return "connected";
    case ConnectionState::suspended: return "suspended";
    case ConnectionState::reconnected: return "reconnected";
    case ConnectionState::lost: return "lost";
  }
  return "unknown";
}

Op Op::create(std::string path, std::string data, CreateMode mode) {
  return {.kind = Kind::create, .path = std::move(path), .data = std::move(data), .mode = mode};
}
Op Op::remove(std::string path, int version) {
  return {.kind = Kind::remove, .path = std::move(path), .version = version};
}
Op Op::set_data(std::string path, std::string data, int version) {
  return {.kind = Kind::set_data, .path = std::move(path), .data = std::move(data), .version = version};
}
Op Op::check(std::string path, int version) {
  return {.kind = Kind::check, .path = std::move(path), .version = version};
}

void validate_connect_string(std::string_view connect) {
  auto fail = [&](const std::string& why) {
    throw Error(Errc::invalid_argument,
                "malformed ZooKeeper connect string '" + std::string(connect.substr(0, 200)) + "': " + why +
                    " (expected host:port[,host:port...][/chroot])");
  };
  if (connect.empty()) fail("empty");
  const auto slash = connect.find('/');
  const auto hosts = connect.substr(0, slash);
  if (slash != std::string_view::npos) {
    try {
      validate_path_syntax(connect.substr(slash), "chroot");
    } catch (const Error& e) {
      fail(e.what());
    }
  }
  if (hosts.empty()) fail("no host");
  std::size_t start = 0;
  while (start <= hosts.size()) {
    auto end = hosts.find(',', start);
    if (end == std::string_view::npos) end = hosts.size();
    const auto entry = hosts.substr(start, end - start);
    if (entry.empty()) fail("empty host entry");
    const auto colon = entry.rfind(':');
    if (colon == std::string_view::npos || colon == 0) fail("'" + std::string(entry) + "' lacks host:port");
    auto host = entry.substr(0, colon);
    if (host.front() == '[') {
      if (host.back() != ']' || host.size() < 3) fail("bad IPv6 address in '" + std::string(entry) + "'");
    } else {
      for (char c : host) {
        const bool ok = std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_';
        if (!ok) fail("bad host name '" + std::string(host) + "'");
      }
    }
    const auto port_text = entry.substr(colon + 1);
    int port = 0;
    auto [p, ec] = std::from_chars(port_text.data(), port_text.data() + port_text.size(), port);
    if (ec != std::errc() || p != port_text.data() + port_text.size() || port < 1 || port > 65535) {
      fail("bad port '" + std::string(port_text) + "'");
    }
    start = end + 1;
  }
}

std::string digest_acl_id(std::string_view user, std::string_view password) {
  std::string cred;
  cred.append(user).append(":").append(password);
  return std::string(user) + ":" + base64(sha1(cred));
}

Client::Client(ClientOptions options) {
  validate_connect_string(options.connect);
  if (options.session_timeout <= 0ms) throw Error(Errc::invalid_argument, "session timeout must be positive");
  if (options.connect_timeout <= 0ms) throw Error(Errc::invalid_argument, "connect timeout must be positive");
  if (options.wait_check < 0ms) throw Error(Errc::invalid_argument, "wait check period must not be negative");
  if (options.watch_budget_bytes == 0) throw Error(Errc::invalid_argument, "watch budget must be positive");
  impl_ = std::make_shared<Impl>(std::move(options));
  impl_->start();
}

Client::~Client() { impl_->shutdown(); }

const ClientOptions& Client::options() const noexcept { return impl_->opts; }

ConnectionState Client::state() const {
  std::lock_guard lk(impl_->mu_);
  return impl_->state_;
}
bool Client::connected() const { return impl_->connected(); }
std::int64_t Client::session_id() const { return impl_->session_id(); }
std::uint64_t Client::session_epoch() const { return impl_->epoch(); }
std::uint64_t Client::diverged_servers_seen() const {
  auto n = impl_->diverged_seen();
  for (const auto& s : impl_->shards->all()) n += s->diverged_seen();
  return n;
}
std::size_t Client::sessions() const { return 1 + impl_->shards->all().size(); }
std::vector<std::size_t> Client::seated_watch_bytes() const {
  std::vector<std::size_t> out{impl_->seated_bytes()};
  for (const auto& s : impl_->shards->all()) out.push_back(s->seated_bytes());
  return out;
}
std::uint64_t Client::reconnect_loops_seen() const {
  auto n = impl_->reconnect_loops_seen();
  for (const auto& s : impl_->shards->all()) n += s->reconnect_loops_seen();
  return n;
}

std::chrono::milliseconds Client::Impl::wait_check_period() const {
  const auto want = opts.wait_check > 0ms ? opts.wait_check : negotiated();
  return std::max<std::chrono::milliseconds>(want, 500ms);
}

void Client::Impl::note_diverged(const std::string& lock_path, const std::string& detail) {
  diverged_seen_.fetch_add(1);
  log->warn("zookeeper session 0x{:x}: {} (docs/operations.md, \"A diverged server\")", session_id(), detail);
  // The server is named now, the move made on the timer thread (it resolves
  // names; the caller holds its attempt's lock).
  if (auto diverged = connected_server(*this)) defer([this, s = *diverged] { leave_diverged_server(*this, s); });
  if (!opts.observer) return;
  post_user([observer = opts.observer, log = log, lock_path, detail] {
    try {
      observer->diverged_server(lock_path, detail);
    } catch (const std::exception& e) {
      log->error("lock observer threw: {}", e.what());
    } catch (...) {
      log->error("lock observer threw");
    }
  });
}
std::chrono::milliseconds Client::negotiated_timeout() const { return impl_->negotiated(); }
Clock::time_point Client::valid_until() const { return impl_->valid_until(); }

bool Client::wait_connected(std::chrono::milliseconds timeout) const {
  std::unique_lock lk(impl_->mu_);
  return impl_->state_cv_.wait_for(lk, timeout, [&] {
    return impl_->has_session_ &&
           (impl_->state_ == ConnectionState::connected || impl_->state_ == ConnectionState::reconnected);
  });
}

Client::ListenerId Client::add_listener(std::function<void(ConnectionState)> listener) {
  std::lock_guard lk(impl_->mu_);
  const auto id = impl_->next_listener_++;
  impl_->listeners_.emplace(id, std::move(listener));
  return id;
}

void Client::remove_listener(ListenerId id) {
  std::lock_guard lk(impl_->mu_);
  impl_->listeners_.erase(id);
}

const std::string& Client::owner_prefix() const noexcept { return impl_->owner_prefix; }

std::string Client::default_owner() const {
  return impl_->owner_prefix + "/" + std::to_string(static_cast<long>(::syscall(SYS_gettid)));
}

void Client::post(std::function<void()> fn) { impl_->post_user(std::move(fn)); }

void Client::create_async(std::string path, std::string data, CreateMode mode,
                          std::function<void(Status, const std::string&, const Stat&)> done) {
  impl_->create(std::move(path), std::move(data), mode, std::move(done));
}
void Client::get_async(std::string path, Watcher watch, std::function<void(Status, std::string, const Stat&)> done) {
  impl_->get(std::move(path), std::move(watch), std::move(done));
}
void Client::children_async(std::string path, Watcher watch,
                            std::function<void(Status, std::vector<std::string>)> done) {
  impl_->get_children(std::move(path), std::move(watch), std::move(done));
}
void Client::stat_async(std::string path, Watcher watch, std::function<void(Status, const Stat&)> done) {
  impl_->exists(std::move(path), std::move(watch), std::move(done));
}
void Client::set_data_async(std::string path, std::string data, int version,
                            std::function<void(Status, const Stat&)> done) {
  impl_->set_data(std::move(path), std::move(data), version, std::move(done));
}
void Client::remove_async(std::string path, int version, std::function<void(Status)> done) {
  impl_->remove(std::move(path), version, std::move(done));
}
void Client::multi_async(std::vector<Op> ops, std::function<void(Status, std::vector<OpResult>)> done) {
  impl_->multi(std::move(ops), std::move(done));
}
void Client::ensemble_id_async(std::function<void(Status, const std::string&)> done) {
  impl_->ensemble_id_async(std::move(done));
}

// --- synchronous forms: one asynchronous call, waited for ---

namespace {

void refuse_in_callback(const char* what) {
  if (Client::Impl::in_callback()) {
    throw Error(Errc::invalid_state, std::string("zklock::Client::") + what +
                                         " is synchronous and cannot run inside a zklock callback");
  }
}

// Issues one asynchronous operation through `issue(done)` and waits for its
// answer: a tuple of the Status and the callback's other arguments (decayed).
// Refuses inside a callback: the answer would need the very thread that waits.
// The promise is shared with the callback, which may still be returning from
// set_value when the caller has its answer and leaves.
template <class... Args, class Issue>
auto call_and_wait(const char* what, Issue&& issue) {
  refuse_in_callback(what);
  using Result = std::tuple<Status, std::decay_t<Args>...>;
  auto p = std::make_shared<std::promise<Result>>();
  auto f = p->get_future();
  issue([p](Status st, Args... args) { p->set_value(Result{st, std::forward<Args>(args)...}); });
  return f.get();
}

// True when ok; false for a missing node when `missing_ok` (the try_ forms);
// throws every other failure.
bool answered(const Status& st, bool missing_ok, const std::string& context) {
  if (st.ok()) return true;
  if (missing_ok && st.is(Errc::no_node)) return false;
  throw st.error(context);
}

std::optional<std::string> read_data(Client::Impl& impl, const std::string& path, Stat* stat, bool missing_ok) {
  auto [st, data, s] = call_and_wait<std::string, const Stat&>(
      "get", [&](auto done) { impl.get(path, nullptr, std::move(done)); });
  if (!answered(st, missing_ok, "reading " + path)) return std::nullopt;
  if (stat) *stat = s;
  return std::move(data);
}

std::optional<std::vector<std::string>> list(Client::Impl& impl, const std::string& path, bool missing_ok) {
  auto [st, names] = call_and_wait<std::vector<std::string>>(
      "children", [&](auto done) { impl.get_children(path, nullptr, std::move(done)); });
  if (!answered(st, missing_ok, "listing " + path)) return std::nullopt;
  return std::move(names);
}

std::optional<Stat> read_stat(Client::Impl& impl, const std::string& path, bool missing_ok) {
  auto [st, s] = call_and_wait<const Stat&>("stat", [&](auto done) { impl.exists(path, nullptr, std::move(done)); });
  if (!answered(st, missing_ok, "stat " + path)) return std::nullopt;
  return s;
}

}  // namespace

std::string Client::create(const std::string& path, std::string data, CreateMode mode) {
  auto [st, created, s] = call_and_wait<const std::string&, const Stat&>(
      "create", [&](auto done) { impl_->create(path, std::move(data), mode, std::move(done)); });
  answered(st, false, "creating " + path);
  return created;
}

void Client::ensure_path(const std::string& path, CreateMode parent_mode) {
  refuse_in_callback("ensure_path");
  if (path.empty() || path == "/") return;
  auto try_create = [&](const std::string& p) {
    return std::get<0>(call_and_wait<const std::string&, const Stat&>(
        "ensure_path", [&](auto done) { impl_->create(p, "", parent_mode, std::move(done)); }));
  };
  Status st = try_create(path);
  if (st.ok() || st.is(Errc::node_exists)) return;
  if (!st.is(Errc::no_node)) throw st.error("creating " + path);
  ensure_path(split_path(path).first, parent_mode);
  st = try_create(path);
  if (!st.ok() && !st.is(Errc::node_exists)) throw st.error("creating " + path);
}

std::string Client::get(const std::string& path, Stat* stat) { return *read_data(*impl_, path, stat, false); }
std::optional<std::string> Client::try_get(const std::string& path, Stat* stat) {
  return read_data(*impl_, path, stat, true);
}
std::vector<std::string> Client::children(const std::string& path) { return *list(*impl_, path, false); }
std::optional<std::vector<std::string>> Client::try_children(const std::string& path) {
  return list(*impl_, path, true);
}
Stat Client::stat(const std::string& path) { return *read_stat(*impl_, path, false); }
std::optional<Stat> Client::try_stat(const std::string& path) { return read_stat(*impl_, path, true); }

Stat Client::set_data(const std::string& path, std::string data, int version) {
  auto [st, s] = call_and_wait<const Stat&>(
      "set_data", [&](auto done) { impl_->set_data(path, std::move(data), version, std::move(done)); });
  answered(st, false, "writing " + path);
  return s;
}

void Client::remove(const std::string& path, int version) {
  auto [st] = call_and_wait<>("remove", [&](auto done) { impl_->remove(path, version, std::move(done)); });
  answered(st, false, "deleting " + path);
}

std::vector<OpResult> Client::multi(std::vector<Op> ops) {
  std::vector<std::string> paths;  // for the message: ops move into the request
  for (const auto& op : ops) paths.push_back(op.path);
  auto [st, results] = call_and_wait<std::vector<OpResult>>(
      "multi", [&](auto done) { impl_->multi(std::move(ops), std::move(done)); });
  if (st.ok()) return std::move(results);
  for (std::size_t i = 0; i < results.size() && i < paths.size(); ++i) {
    const auto& r = results[i].status;
    if (!r.ok() && !r.is(Errc::runtime_inconsistency)) {
      throw r.error("multi: op " + std::to_string(i) + " on " + paths[i]);
    }
  }
  throw st.error("multi of " + std::to_string(paths.size()) + " ops");
}

std::string Client::ensemble_id() {
  auto [st, id] = call_and_wait<const std::string&>(
      "ensemble_id", [&](auto done) { impl_->ensemble_id_async(std::move(done)); });
  answered(st, false, "reading the ensemble id at /zklock/ensemble-id");
  return id;
}

}  // namespace zklock
