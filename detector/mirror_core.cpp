// The mirror's work queue: what is read, when, and on which session.
#include "detector/mirror_core.hpp"

#include <spdlog/spdlog.h>

namespace zklock::detector {

Mirror::Core::Core(Client& c, MirrorOptions o) : client(c), opt(std::move(o)) {
  log = opt.log ? opt.log : spdlog::default_logger();
}

void Mirror::Core::enqueue_list(const std::string& path, Dir& d) {
  if (d.listing) {
    d.relist = true;
    return;
  }
  d.listing = true;
  queue.push_back({Work::list, path, generation});
}

void Mirror::Core::enqueue_get(const std::string& path, Node& n) {
  if (n.reading || n.have_stat) return;
  n.reading = true;
  queue.push_back({Work::get, path, generation});
}

// Pops what may run now, marks it in flight; issued outside mu.
std::vector<Mirror::Core::Work> Mirror::Core::take_work() {
  std::vector<Work> batch;
  while (!stopped && inflight < opt.max_inflight && !queue.empty()) {
    Work w = std::move(queue.front());
    queue.pop_front();
    if (w.generation != generation) continue;
    if (w.kind == Work::list) {
      auto it = dirs.find(w.path);
      if (it == dirs.end()) continue;
      w.watch = !it->second.watch_armed;
      it->second.watch_armed = true;
    } else if (w.kind == Work::watch_root) {
      if (root_watch_armed) continue;
      root_watch_armed = true;
    }
    ++inflight;
    ++stats.ops_issued;
    batch.push_back(std::move(w));
  }
  return batch;
}

void Mirror::Core::pump() {
  std::vector<Work> batch;
  {
    std::lock_guard lock(mu);
    batch = take_work();
    if (idle_locked()) {
      if (load_started) {
        stats.load_seconds = std::chrono::duration<double>(Clock::now() - *load_started).count();
        load_started.reset();
      }
      idle_cv.notify_all();
    }
  }
  for (auto& w : batch) issue(std::move(w));
}

void Mirror::Core::issue(Work w) {
  auto self = shared_from_this();
  std::weak_ptr<Core> weak = self;
  const auto gen = w.generation;
  switch (w.kind) {
    case Work::list: {
      Watcher watcher;
      if (w.watch) {
        watcher = [weak, path = w.path, gen](const WatchEvent&) {
          if (auto core = weak.lock()) core->on_dir_watch(path, gen);
        };
      }
      client.children_async(w.path, std::move(watcher), [self, w](Status s, std::vector<std::string> children) {
        self->on_list(w, s, std::move(children));
      });
      break;
    }
    case Work::get:
      client.get_async(w.path, {},
                       [self, w](Status s, std::string data, const Stat& st) { self->on_get(w, s, data, st); });
      break;
    case Work::watch_root:
      client.stat_async(
          w.path,
          [weak, gen](const WatchEvent&) {
            if (auto core = weak.lock()) core->on_root_watch(gen);
          },
          [self, w](Status s, const Stat&) { self->on_root_exists(w, s); });
      break;
  }
}

void Mirror::Core::on_dir_watch(const std::string& path, std::uint64_t gen) {
  {
    std::lock_guard lock(mu);
    if (stopped || gen != generation) return;
    auto it = dirs.find(path);
    if (it == dirs.end()) return;
    it->second.watch_armed = false;
    enqueue_list(path, it->second);
  }
  pump();
}

void Mirror::Core::on_root_watch(std::uint64_t gen) {
  {
    std::lock_guard lock(mu);
    if (stopped || gen != generation) return;
    root_watch_armed = false;
    if (auto it = dirs.find(opt.root); it != dirs.end()) enqueue_list(opt.root, it->second);
  }
  pump();
}

void Mirror::Core::on_root_exists(const Work& w, Status s) {
  {
    std::lock_guard lock(mu);
    --inflight;
    if (stopped || w.generation != generation) {
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
    if (!stopped && w.generation == generation) apply_list(w, s, children);
  }
  pump();
}

// Every directory is listed again; the listings issue the reads that
// contended queues still lack (invariant (4)), so a restart enqueues no get
// itself.
void Mirror::Core::restart_all(Restart why) {
  {
    std::lock_guard lock(mu);
    if (stopped) return;
    ++stats.resyncs;
    if (why == Restart::new_session) {
      ++generation;
      queue.clear();
      root_watch_armed = false;
      for (auto& [path, d] : dirs) {
        d.watch_armed = false;
        d.listing = false;
        d.relist = false;
      }
      for (auto& [path, n] : nodes) n.reading = false;
    }
    if (why != Restart::resync) load_started = Clock::now();
    if (dirs.find(opt.root) == dirs.end()) dirs[opt.root] = Dir{};
    for (auto& [path, d] : dirs) enqueue_list(path, d);
  }
  pump();
}

}  // namespace zklock::detector
