#include "detector/mirror.hpp"

#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <set>

#include <spdlog/spdlog.h>

#include "zklock/protocol/node_data.hpp"

namespace zklock::detector {

struct Mirror::Core : std::enable_shared_from_this<Mirror::Core> {
  // Invariants (under mu): every Dir in `dirs` is the root or a descendant
  // of a listed Dir; every Node's lock is a Dir whose `locks` names it;
  // `index` holds one QueueNode per Node, under (Node::lock, child name), so
  // a scan reads the index alone; `listing` is true exactly while a list of
  // that Dir is queued or in flight.
  struct Dir {
    std::size_t depth = 0;
    bool watch_armed = false;
    bool listing = false;
    bool relist = false;  // a watch fired while a list was in flight
    bool skipped = false;
    std::set<std::string> locks;    // child names that are lock nodes
    std::set<std::string> subdirs;  // child names that are directories
  };
  struct Node {
    std::string lock;
    bool have_stat = false;
    bool reading = false;
  };
  struct Work {
    enum Kind { list, get, watch_root } kind;
    std::string path;
    std::uint64_t generation;
    bool watch = false;
  };

  Core(Client& c, MirrorOptions o) : client(c), opt(std::move(o)) {
    log = opt.log ? opt.log : spdlog::default_logger();
  }

  Client& client;
  MirrorOptions opt;
  std::shared_ptr<spdlog::logger> log;
  Client::ListenerId listener = 0;

  mutable std::mutex mu;
  mutable std::condition_variable idle_cv;
  bool stopped = false;                    // GUARDED_BY(mu)
  std::uint64_t generation = 1;            // GUARDED_BY(mu): bumped per new session
  bool root_watch_armed = false;           // GUARDED_BY(mu)
  std::map<std::string, Dir> dirs;         // GUARDED_BY(mu)
  std::map<std::string, Node> nodes;       // GUARDED_BY(mu), by full path
  model::LockIndex index;                         // GUARDED_BY(mu): the nodes' queues
  std::deque<Work> queue;                  // GUARDED_BY(mu)
  std::size_t inflight = 0;                // GUARDED_BY(mu)
  MirrorStats stats;                       // GUARDED_BY(mu), counters only

  static std::string child_path(const std::string& dir, const std::string& name) {
    return dir == "/" ? "/" + name : dir + "/" + name;
  }
  static std::string child_name(const std::string& dir, const std::string& path) {
    return path.substr(dir == "/" ? 1 : dir.size() + 1);
  }

  // --- under mu ---
  void enqueue_list(const std::string& path, Dir& d) {
    if (d.listing) {
      d.relist = true;
      return;
    }
    d.listing = true;
    queue.push_back({Work::list, path, generation});
  }
  void enqueue_get(const std::string& path, Node& n) {
    if (n.reading) return;
    n.reading = true;
    queue.push_back({Work::get, path, generation});
  }
  // The one way a lock node leaves the mirror (keeps `index` in step).
  void erase_node(const std::string& dir, const std::string& name) {
    nodes.erase(child_path(dir, name));
    index.erase(dir, name);
  }
  void drop_content(const std::string& path, Dir& d) {
    for (const auto& name : d.locks) erase_node(path, name);
    for (const auto& name : d.subdirs) forget_subtree(child_path(path, name));
    d.locks.clear();
    d.subdirs.clear();
  }
  void forget_subtree(const std::string& path) {
    auto it = dirs.find(path);
    if (it == dirs.end()) return;
    drop_content(path, it->second);
    dirs.erase(path);
  }
  bool idle_locked() const { return queue.empty() && inflight == 0; }

  // Pops what may run now, marks it in flight; issued outside mu.
  std::vector<Work> take_work() {
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

  void pump() {
    std::vector<Work> batch;
    {
      std::lock_guard lock(mu);
      batch = take_work();
      if (idle_locked()) idle_cv.notify_all();
    }
    for (auto& w : batch) issue(std::move(w));
  }

  void issue(Work w) {
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
        client.children_async(w.path, std::move(watcher),
                              [self, w](Status s, std::vector<std::string> children) {
                                self->on_list(w, s, std::move(children));
                              });
        break;
      }
      case Work::get:
        client.get_async(w.path, {}, [self, w](Status s, std::string data, const Stat& st) {
          self->on_get(w, s, data, st);
        });
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

  void on_dir_watch(const std::string& path, std::uint64_t gen) {
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

  void on_root_watch(std::uint64_t gen) {
    {
      std::lock_guard lock(mu);
      if (stopped || gen != generation) return;
      root_watch_armed = false;
      if (auto it = dirs.find(opt.root); it != dirs.end()) enqueue_list(opt.root, it->second);
    }
    pump();
  }

  void on_root_exists(const Work& w, Status s) {
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

  void on_list(const Work& w, Status s, std::vector<std::string> children) {
    {
      std::lock_guard lock(mu);
      --inflight;
      if (!stopped && w.generation == generation) apply_list(w, s, children);
    }
    pump();
  }

  void apply_list(const Work& w, Status s, const std::vector<std::string>& children) {
    auto it = dirs.find(w.path);
    if (it == dirs.end()) return;  // forgotten while the list was in flight
    Dir& d = it->second;
    d.listing = false;
    if (!s.ok() && w.watch) d.watch_armed = false;  // a failed read registers no watch
    if (s.ok()) {
      if (children.size() > opt.max_children) {
        if (!d.skipped) {
          log->warn("mirror: skipping {}: {} children exceed --max-children {}", w.path, children.size(),
                    opt.max_children);
          ++stats.skipped_dirs;
        }
        d.skipped = true;
        drop_content(w.path, d);
      } else {
        d.skipped = false;
        apply_children(w.path, d, children);
      }
    } else if (s.is(Errc::no_node)) {
      if (w.path == opt.root) {
        drop_content(w.path, d);
        queue.push_back({Work::watch_root, w.path, generation});
      } else {
        forget_subtree(w.path);  // the parent's watch reports the deletion too
        return;
      }
    } else if (s.is(Errc::no_auth)) {
      if (!d.skipped) {
        log->warn("mirror: skipping {}: no READ permission (NOAUTH)", w.path);
        ++stats.skipped_dirs;
      }
      d.skipped = true;
      drop_content(w.path, d);
    } else {
      log->debug("mirror: listing {} failed: {}; retried at the next resync", w.path, errc_name(s.code()));
    }
    if (d.relist) {
      d.relist = false;
      enqueue_list(w.path, d);
    }
  }

  void apply_children(const std::string& path, Dir& d, const std::vector<std::string>& children) {
    std::set<std::string> locks, subdirs;
    for (const auto& name : children) {
      if (auto q = model::queue_node_from_name(name)) {
        locks.insert(name);
        if (d.locks.count(name)) continue;
        const auto full = child_path(path, name);
        auto [nit, inserted] = nodes.try_emplace(full, Node{path});
        if (inserted) {
          index.insert(path, std::move(*q));
          enqueue_get(full, nit->second);
        }
        continue;
      }
      if (d.subdirs.count(name)) {
        subdirs.insert(name);
        continue;
      }
      if (d.depth + 1 > opt.max_depth) {
        ++stats.skipped_dirs;
        log->warn("mirror: not descending into {}: deeper than --max-depth {}", child_path(path, name),
                  opt.max_depth);
        continue;
      }
      subdirs.insert(name);
      const auto full = child_path(path, name);
      auto& sub = dirs[full];
      sub.depth = d.depth + 1;
      enqueue_list(full, sub);
    }
    for (const auto& name : d.locks) {
      if (!locks.count(name)) erase_node(path, name);
    }
    for (const auto& name : d.subdirs) {
      if (!subdirs.count(name)) forget_subtree(child_path(path, name));
    }
    d.locks = std::move(locks);
    d.subdirs = std::move(subdirs);
  }

  void on_get(const Work& w, Status s, const std::string& data, const Stat& st) {
    std::function<void()> notify;
    {
      std::lock_guard lock(mu);
      --inflight;
      if (!stopped && w.generation == generation) {
        auto it = nodes.find(w.path);
        if (it != nodes.end()) {
          Node& n = it->second;
          n.reading = false;
          const auto name = child_name(n.lock, w.path);
          if (s.ok()) {
            n.have_stat = true;
            auto decoded = decode_node_data(data);
            if (decoded && owner_key(decoded->owner) == parse_lock_node_name(name)->owner_key) {
              index.set_read(n.lock, name, st.czxid, st.ctime, std::move(decoded->owner), decoded->priority);
            } else {
              index.set_read(n.lock, name, st.czxid, st.ctime, {}, 0);
              ++stats.bad_data;
              log->warn("mirror: {}: node data ({} bytes) is malformed, oversized or names another owner; "
                        "owner taken from the node name",
                        w.path, data.size());
            }
            if (opt.on_node_added) {
              notify = [cb = opt.on_node_added, lock_path = n.lock, ctime = st.ctime] { cb(lock_path, ctime); };
            }
          } else if (s.is(Errc::no_node)) {
            const auto lock_path = n.lock;
            if (auto d = dirs.find(lock_path); d != dirs.end()) d->second.locks.erase(name);
            erase_node(lock_path, name);
          } else {
            log->debug("mirror: reading {} failed: {}; retried at the next resync", w.path, errc_name(s.code()));
          }
        }
      }
    }
    if (notify) notify();
    pump();
  }

  void restart_all(bool new_session) {
    {
      std::lock_guard lock(mu);
      if (stopped) return;
      ++stats.resyncs;
      if (new_session) {
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
      if (dirs.find(opt.root) == dirs.end()) dirs[opt.root] = Dir{};
      for (auto& [path, d] : dirs) enqueue_list(path, d);
      for (auto& [path, n] : nodes) {
        if (!n.have_stat) enqueue_get(path, n);
      }
    }
    pump();
  }
};

Mirror::Mirror(Client& client, MirrorOptions options)
    : core_(std::make_shared<Core>(client, std::move(options))) {}

Mirror::~Mirror() {
  {
    std::lock_guard lock(core_->mu);
    core_->stopped = true;
    core_->queue.clear();
  }
  if (core_->listener) core_->client.remove_listener(core_->listener);
}

void Mirror::start() {
  std::weak_ptr<Core> weak = core_;
  const auto epoch = core_->client.session_epoch();
  core_->listener = core_->client.add_listener([weak, epoch](ConnectionState s) {
    if (s != ConnectionState::connected) return;
    if (auto core = weak.lock()) {
      if (core->client.session_epoch() == epoch) return;  // the session start() already mirrors
      core->log->info("mirror: new ZooKeeper session: re-mirroring {}", core->opt.root);
      core->restart_all(true);
    }
  });
  core_->restart_all(false);
}

void Mirror::resync() { core_->restart_all(false); }

model::QueueSnapshot Mirror::snapshot() const {
  std::lock_guard lock(core_->mu);
  return core_->index.snapshot();
}

std::vector<model::LockQueue> Mirror::queues() const {
  std::lock_guard lock(core_->mu);
  return core_->index.queues();
}

std::vector<model::LoneNode> Mirror::lone_nodes(const std::string& owner_key) const {
  std::lock_guard lock(core_->mu);
  return core_->index.lone_nodes(owner_key);
}

MirrorStats Mirror::stats() const {
  std::lock_guard lock(core_->mu);
  auto s = core_->stats;
  s.dirs = core_->dirs.size();
  s.nodes = core_->nodes.size();
  s.pending = core_->queue.size() + core_->inflight;
  return s;
}

bool Mirror::idle() const {
  std::lock_guard lock(core_->mu);
  return core_->idle_locked();
}

bool Mirror::wait_idle(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(core_->mu);
  return core_->idle_cv.wait_for(lock, timeout, [&] { return core_->idle_locked(); });
}

}  // namespace zklock::detector
