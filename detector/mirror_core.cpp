// The mirror's work queue: what is read, when, and on which session.
#include "detector/mirror_core.hpp"

#if defined(__GLIBC__)
#include <malloc.h>
#endif

#include <spdlog/spdlog.h>

namespace zklock::detector {

namespace {
// "host:port,host:port/chroot" -> "/chroot" ("" without one).
std::string chroot_of(const std::string& connect) {
  const auto slash = connect.find('/');
  if (slash == std::string::npos || connect.size() == slash + 1) return {};
  return connect.substr(slash);
}
}  // namespace

Mirror::Core::Core(Client& c, MirrorOptions o)
    : client(c), opt(std::move(o)), chroot(chroot_of(c.options().connect)),
      budget(c.options().watch_budget_bytes) {
  log = opt.log ? opt.log : spdlog::default_logger();
  auto primary = std::make_unique<Session>();
  primary->client = &client;
  sessions.push_back(std::move(primary));
}

// Invariant (5): the Dir is given a session here, the first time; with none
// to spare it is parked until the opener brings one.
void Mirror::Core::enqueue_list(const std::string& path, Dir& d) {
  if (d.listing) {
    d.relist = true;
    return;
  }
  d.listing = true;
  if (d.session == kNoSession && !assign_session(path, d)) {
    parked.push_back(path);
    if (!want_session) {
      want_session = true;
      session_cv.notify_all();
    }
    return;
  }
  queue.push_back({Work::list, path, d.session, sessions[d.session]->generation});
}

void Mirror::Core::enqueue_get(const std::string& path, NodeState& n, const Dir& d) {
  if (n.reading || n.have_stat || d.session == kNoSession) return;
  n.reading = true;
  queue.push_back({Work::get, path, d.session, sessions[d.session]->generation});
}

// A load's transient memory (the queued work, the listings, the replies'
// callbacks) is freed once the mirror is idle, but glibc keeps freed pages
// inside its heaps, interleaved with the mirror's state; trimming hands
// them back, so the process's RSS after a load is what the mirror keeps.
void Mirror::Core::give_back_free_memory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

// Pops what may run now, marks it in flight; issued outside mu.
std::vector<Mirror::Core::Work> Mirror::Core::take_work() {
  std::vector<Work> batch;
  while (!stopped && inflight < opt.max_inflight && !queue.empty()) {
    Work w = std::move(queue.front());
    queue.pop_front();
    if (!current(w)) continue;
    if (w.kind == Work::list) {
      auto it = dirs.find(w.path);
      // A Dir forgotten and met again since may be on another session.
      if (it == dirs.end() || it->second.session != w.session) continue;
      w.watch = !it->second.watch_armed;
      it->second.watch_armed = true;
    } else if (w.kind == Work::watch_root) {
      if (root_watch_armed) continue;
      root_watch_armed = true;
    }
    w.client = sessions[w.session]->client;
    ++inflight;
    ++stats.ops_issued;
    batch.push_back(std::move(w));
  }
  if (!batch.empty()) ++issuing;
  return batch;
}

void Mirror::Core::pump() {
  std::vector<Work> batch;
  bool loaded = false;
  {
    std::lock_guard lock(mu);
    batch = take_work();
    if (idle_locked()) {
      if (load_started) {
        stats.load_seconds = std::chrono::duration<double>(Clock::now() - *load_started).count();
        load_started.reset();
        loaded = true;
      }
      idle_cv.notify_all();
    }
  }
  if (loaded) give_back_free_memory();
  if (batch.empty()) return;
  for (auto& w : batch) issue(std::move(w));
  // ~Mirror closes the sessions it opened only once no batch is being issued.
  std::lock_guard lock(mu);
  if (--issuing == 0) issued_cv.notify_all();
}

void Mirror::Core::issue(Work w) {
  auto self = shared_from_this();
  std::weak_ptr<Core> weak = self;
  const auto gen = w.generation;
  const auto session = w.session;
  Client& c = *w.client;
  switch (w.kind) {
    case Work::list: {
      Watcher watcher;
      if (w.watch) {
        watcher = [weak, path = w.path, session, gen](const WatchEvent&) {
          if (auto core = weak.lock()) core->on_dir_watch(path, session, gen);
        };
      }
      c.children_async(w.path, std::move(watcher), [self, w](Status s, std::vector<std::string> children) {
        self->on_list(w, s, std::move(children));
      });
      break;
    }
    case Work::get:
      c.get_async(w.path, {}, [self, w](Status s, std::string data, const Stat& st) { self->on_get(w, s, data, st); });
      break;
    case Work::watch_root:
      c.stat_async(
          w.path,
          [weak, session, gen](const WatchEvent&) {
            if (auto core = weak.lock()) core->on_root_watch(session, gen);
          },
          [self, w](Status s, const Stat&) { self->on_root_exists(w, s); });
      break;
  }
}

void Mirror::Core::on_dir_watch(const std::string& path, std::uint32_t session, std::uint64_t gen) {
  {
    std::lock_guard lock(mu);
    if (stopped || gen != sessions[session]->generation) return;
    auto it = dirs.find(path);
    if (it == dirs.end() || it->second.session != session || !it->second.watch_armed) {
      release_orphan(session, path);  // the watch of a forgotten Dir (invariant (6))
      return;
    }
    it->second.watch_armed = false;
    enqueue_list(path, it->second);
  }
  pump();
}

void Mirror::Core::on_root_watch(std::uint32_t session, std::uint64_t gen) {
  {
    std::lock_guard lock(mu);
    if (stopped || gen != sessions[session]->generation) return;
    root_watch_armed = false;
    if (auto it = dirs.find(opt.root); it != dirs.end()) enqueue_list(opt.root, it->second);
  }
  pump();
}

void Mirror::Core::on_root_exists(const Work& w, Status s) {
  {
    std::lock_guard lock(mu);
    --inflight;
    if (!current(w)) {
    } else if (s.ok()) {
      // Created between our list and this exists: list it (the exists watch
      // stays armed and will fire on its deletion, which is harmless).
      if (auto it = dirs.find(opt.root); it != dirs.end()) enqueue_list(opt.root, it->second);
    } else if (!s.is(Errc::no_node)) {
      root_watch_armed = false;  // retried at the next resync
    }
  }
  pump();
}

void Mirror::Core::on_list(const Work& w, Status s, std::vector<std::string> children) {
  {
    std::lock_guard lock(mu);
    --inflight;
    if (current(w)) apply_list(w, s, children);
  }
  pump();
}

// Every directory is listed again; the listings issue the reads that
// contended queues still lack (invariant (4)), so a restart enqueues no get
// itself. (A replaced session re-lists its own directories: restart_session.)
void Mirror::Core::restart_all(Restart why) {
  {
    std::lock_guard lock(mu);
    if (stopped) return;
    ++stats.resyncs;
    if (why == Restart::start) load_started = Clock::now();
    if (dirs.find(opt.root) == dirs.end()) dirs[opt.root] = Dir{};
    for (auto& [path, d] : dirs) enqueue_list(path, d);
  }
  pump();
}

}  // namespace zklock::detector
