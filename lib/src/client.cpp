// zklock::Client's public surface: forwarding to Impl, synchronous
// conveniences built on the async operations, and input validation.
#include "zklock/client.hpp"

#include <sys/syscall.h>
#include <unistd.h>

#include <charconv>
#include <future>

#include "client_impl.hpp"
#include "digest.hpp"
#include "zklock/protocol/node_name.hpp"

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
  Op op;
  op.kind = Kind::create;
  op.path = std::move(path);
  op.data = std::move(data);
  op.mode = mode;
  return op;
}
Op Op::remove(std::string path, int version) {
  Op op;
  op.kind = Kind::remove;
  op.path = std::move(path);
  op.version = version;
  return op;
}
Op Op::set_data(std::string path, std::string data, int version) {
  Op op;
  op.kind = Kind::set_data;
  op.path = std::move(path);
  op.data = std::move(data);
  op.version = version;
  return op;
}
Op Op::check(std::string path, int version) {
  Op op;
  op.kind = Kind::check;
  op.path = std::move(path);
  op.version = version;
  return op;
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

void Client::create(std::string path, std::string data, CreateMode mode,
                    std::function<void(Status, const std::string&, const Stat&)> done) {
  impl_->create(std::move(path), std::move(data), mode, std::move(done));
}
void Client::get_children(std::string path, Watcher watch,
                          std::function<void(Status, std::vector<std::string>)> done) {
  impl_->get_children(std::move(path), std::move(watch), std::move(done));
}
void Client::exists(std::string path, Watcher watch, std::function<void(Status, const Stat&)> done) {
  impl_->exists(std::move(path), std::move(watch), std::move(done));
}
void Client::get(std::string path, Watcher watch, std::function<void(Status, std::string, const Stat&)> done) {
  impl_->get(std::move(path), std::move(watch), std::move(done));
}
void Client::set_data(std::string path, std::string data, int version,
                      std::function<void(Status, const Stat&)> done) {
  impl_->set_data(std::move(path), std::move(data), version, std::move(done));
}
void Client::remove(std::string path, int version, std::function<void(Status)> done) {
  impl_->remove(std::move(path), version, std::move(done));
}
void Client::multi(std::vector<Op> ops, std::function<void(Status, std::vector<OpResult>)> done) {
  impl_->multi(std::move(ops), std::move(done));
}
void Client::ensemble_id_async(std::function<void(Status, const std::string&)> done) {
  impl_->ensemble_id_async(std::move(done));
}

namespace {
void refuse_in_callback(const char* what) {
  if (Client::Impl::in_callback()) {
    throw Error(Errc::invalid_state, std::string("zklock::Client::") + what +
                                         " is synchronous and cannot run inside a zklock callback");
  }
}
}  // namespace

std::string Client::ensemble_id() {
  refuse_in_callback("ensemble_id");
  std::promise<std::pair<Status, std::string>> p;
  auto f = p.get_future();
  impl_->ensemble_id_async([&p](Status st, const std::string& id) { p.set_value({st, id}); });
  auto [st, id] = f.get();
  if (!st.ok()) throw st.error("reading the ensemble id at /zklock/ensemble-id");
  return id;
}

void Client::ensure_path(const std::string& path, CreateMode parent_mode) {
  refuse_in_callback("ensure_path");
  if (path.empty() || path == "/") return;
  auto try_create = [&](const std::string& p) {
    std::promise<Status> pr;
    auto f = pr.get_future();
    impl_->create(p, "", parent_mode, [&pr](Status st, const std::string&, const Stat&) { pr.set_value(st); });
    return f.get();
  };
  Status st = try_create(path);
  if (st.ok() || st.is(Errc::node_exists)) return;
  if (!st.is(Errc::no_node)) throw st.error("creating " + path);
  ensure_path(split_path(path).first, parent_mode);
  st = try_create(path);
  if (!st.ok() && !st.is(Errc::node_exists)) throw st.error("creating " + path);
}

std::optional<std::string> Client::get_data(const std::string& path, Stat* stat) {
  refuse_in_callback("get_data");
  std::promise<std::tuple<Status, std::string, Stat>> p;
  auto f = p.get_future();
  impl_->get(path, nullptr, [&p](Status st, std::string data, const Stat& s) { p.set_value({st, std::move(data), s}); });
  auto [st, data, s] = f.get();
  if (st.is(Errc::no_node)) return std::nullopt;
  if (!st.ok()) throw st.error("reading " + path);
  if (stat) *stat = s;
  return data;
}

std::vector<std::string> Client::children(const std::string& path) {
  refuse_in_callback("children");
  std::promise<std::pair<Status, std::vector<std::string>>> p;
  auto f = p.get_future();
  impl_->get_children(path, nullptr, [&p](Status st, std::vector<std::string> c) { p.set_value({st, std::move(c)}); });
  auto [st, names] = f.get();
  if (!st.ok()) throw st.error("listing " + path);
  return names;
}

std::optional<Stat> Client::stat(const std::string& path) {
  refuse_in_callback("stat");
  std::promise<std::pair<Status, Stat>> p;
  auto f = p.get_future();
  impl_->exists(path, nullptr, [&p](Status st, const Stat& s) { p.set_value({st, s}); });
  auto [st, s] = f.get();
  if (st.is(Errc::no_node)) return std::nullopt;
  if (!st.ok()) throw st.error("stat " + path);
  return s;
}

}  // namespace zklock
