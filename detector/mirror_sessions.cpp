// The mirror's sessions and their watch budget (mirror.hpp, "Watches are
// spread over sessions"; invariants (5) and (6) in mirror_core.hpp).
#include <algorithm>

#include <spdlog/spdlog.h>

#include "detector/mirror_core.hpp"

namespace zklock::detector {

// As the path travels in SetWatches: a 4-byte length and the server's path
// (chroot + path). The root counts twice: while it is missing the mirror
// sets an exists watch on it, which travels in the same packet.
std::size_t Mirror::Core::watch_cost(const std::string& path) const {
  const std::size_t one = 4 + chroot.size() + (path == "/" && !chroot.empty() ? 0 : path.size());
  return path == opt.root ? 2 * one : one;
}

// The least-filled session with room (the lowest-numbered among equals), so
// a load spreads its directories, and so its listings, over every open
// session, and room freed by deletions is used again. An empty session
// takes any Dir, so no Dir waits forever.
bool Mirror::Core::assign_session(const std::string& path, Dir& d) {
  const auto cost = watch_cost(path);
  auto best = kNoSession;
  for (std::uint32_t i = 0; i < sessions.size(); ++i) {
    const auto& s = *sessions[i];
    if (s.bytes + cost > budget && s.bytes != 0) continue;
    if (best == kNoSession || s.bytes < sessions[best]->bytes) best = i;
  }
  if (best == kNoSession) return false;
  sessions[best]->bytes += cost;
  d.session = best;
  return true;
}

void Mirror::Core::release_dir(const std::string& path, const Dir& d) {
  if (d.session == kNoSession) return;
  auto& s = *sessions[d.session];
  if (d.watch_armed) {
    s.orphan += watch_cost(path);  // still on the server until it fires
  } else {
    s.bytes -= std::min(s.bytes, watch_cost(path));
  }
}

void Mirror::Core::release_orphan(std::uint32_t session, const std::string& path) {
  auto& s = *sessions[session];
  const auto cost = std::min({watch_cost(path), s.orphan, s.bytes});
  s.orphan -= cost;
  s.bytes -= cost;
}

// Parked Dirs try again, in the order they came; those that still find no
// room park again (and ask for one more session).
void Mirror::Core::unpark() {
  auto waiting = std::move(parked);
  parked.clear();
  for (const auto& path : waiting) {
    auto it = dirs.find(path);
    if (it == dirs.end() || it->second.session != kNoSession) continue;
    it->second.listing = false;
    it->second.relist = false;
    enqueue_list(path, it->second);
  }
}

Client::ListenerId Mirror::Core::listen(Client& c, std::uint32_t index) {
  std::weak_ptr<Core> weak = shared_from_this();
  return c.add_listener([weak, index](ConnectionState s) {
    auto core = weak.lock();
    if (!core) return;
    if (s == ConnectionState::connected) core->on_connected(index);
    if (s == ConnectionState::reconnected) core->on_reconnected(index);
  });
}

// A read in flight when the connection dropped failed (connection loss) and,
// for a listing, set no watch; the C client re-arms only the watches that
// were set. So each Dir that lost a read then is listed again now, with its
// watch, instead of waiting for the periodic resync.
void Mirror::Core::on_reconnected(std::uint32_t index) {
  {
    std::lock_guard lock(mu);
    if (stopped || index >= sessions.size()) return;
    auto retry = std::move(sessions[index]->retry);
    sessions[index]->retry.clear();
    for (const auto& path : retry) {
      auto it = dirs.find(path);
      if (it != dirs.end() && it->second.session == index) enqueue_list(path, it->second);
    }
  }
  pump();
}

// A new session (the old one expired) has none of the old one's watches:
// its directories are listed again, with their watches, on the same
// Client. The other sessions' directories are untouched.
void Mirror::Core::on_connected(std::uint32_t index) {
  Client* c = nullptr;
  {
    std::lock_guard lock(mu);
    if (stopped || index >= sessions.size()) return;  // not published yet: its epoch is read after
    c = sessions[index]->client;
  }
  const auto epoch = c->session_epoch();
  {
    std::lock_guard lock(mu);
    auto& s = *sessions[index];
    if (stopped || epoch == s.epoch) return;
    s.epoch = epoch;
    ++s.generation;
    s.bytes -= s.orphan;
    s.orphan = 0;
    s.retry.clear();  // every Dir of the session is listed again below
    ++stats.resyncs;
    load_started = Clock::now();
    std::erase_if(queue, [&](const Work& w) { return w.session == index; });
    if (auto r = dirs.find(opt.root); r != dirs.end() && r->second.session == index) root_watch_armed = false;
    std::size_t relisted = 0;
    for (auto& [path, d] : dirs) {
      if (d.session != index) continue;
      d.watch_armed = d.listing = d.relist = false;
      for (auto& [name, n] : d.locks) n.reading = false;
      enqueue_list(path, d);
      ++relisted;
    }
    log->info("mirror: watch session {} of {} is new (the old one expired): re-listing its {} directories", index,
              sessions.size(), relisted);
  }
  pump();
}

void Mirror::Core::open_sessions() {
  std::unique_lock lock(mu);
  for (;;) {
    session_cv.wait(lock, [&] { return stopped || want_session || sessions.size() < opt.load_sessions; });
    if (stopped) return;
    const auto index = static_cast<std::uint32_t>(sessions.size());  // only this thread adds sessions
    lock.unlock();
    std::unique_ptr<Client> c;
    try {
      c = std::make_unique<Client>(client.options());
    } catch (const std::exception& e) {
      log->warn("mirror: opening watch session {} failed: {}; retrying in 1 s", index, e.what());
      lock.lock();
      session_cv.wait_for(lock, std::chrono::seconds(1), [&] { return stopped; });
      continue;
    }
    const auto listener = listen(*c, index);
    const auto epoch = c->session_epoch();  // after listen(): a later replacement is heard
    lock.lock();
    if (stopped) {
      lock.unlock();
      c.reset();  // on this thread, never in a callback of its own
      return;
    }
    auto s = std::make_unique<Session>();
    s->client = c.get();
    s->owned = std::move(c);
    s->listener = listener;
    s->epoch = epoch;
    sessions.push_back(std::move(s));
    want_session = false;
    session_cv.notify_all();  // start() may be waiting for the load sessions
    log->info("mirror: opened watch session {} (budget {} bytes of watched paths each)", index, budget);
    unpark();
    lock.unlock();
    pump();
    lock.lock();
  }
}

std::vector<std::pair<Client*, Client::ListenerId>> Mirror::Core::stop(std::vector<std::unique_ptr<Client>>& owned) {
  std::unique_lock lock(mu);
  stopped = true;
  queue.clear();
  parked.clear();
  session_cv.notify_all();
  issued_cv.wait(lock, [&] { return issuing == 0; });
  std::vector<std::pair<Client*, Client::ListenerId>> listeners;
  for (auto& s : sessions) {
    if (s->listener) listeners.emplace_back(s->client, s->listener);
    if (s->owned) owned.push_back(std::move(s->owned));
  }
  return listeners;
}

}  // namespace zklock::detector
