// Applying the mirror's replies: a directory's listing (diffed against what
// the mirror had) and a lock node's read.
#include <spdlog/spdlog.h>

#include "detector/mirror_core.hpp"
#include "zklock/protocol/node_data.hpp"

namespace zklock::detector {

// The one way a lock node leaves the mirror (keeps `index` in step).
void Mirror::Core::erase_node(const std::string& dir, const std::string& name) {
  nodes.erase(child_path(dir, name));
  index.erase(dir, name);
}

void Mirror::Core::drop_content(const std::string& path, Dir& d) {
  for (const auto& name : d.locks) erase_node(path, name);
  for (const auto& name : d.subdirs) forget_subtree(child_path(path, name));
  d.locks.clear();
  d.subdirs.clear();
}

void Mirror::Core::forget_subtree(const std::string& path) {
  auto it = dirs.find(path);
  if (it == dirs.end()) return;
  drop_content(path, it->second);
  release_dir(path, it->second);
  dirs.erase(path);
}

void Mirror::Core::apply_list(const Work& w, Status s, const std::vector<std::string>& children) {
  auto it = dirs.find(w.path);
  if (it == dirs.end() || it->second.session != w.session) {
    // Forgotten while the list was in flight: a failed list armed no watch.
    if (w.watch && !s.ok()) release_orphan(w.session, w.path);
    return;
  }
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
      queue.push_back({Work::watch_root, w.path, d.session, sessions[d.session]->generation});
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
    // Retried when the session reconnects (a lost connection), else at the
    // next resync.
    sessions[w.session]->retry.push_back(w.path);
    log->debug("mirror: listing {} failed: {}; retried on reconnect or at the next resync", w.path,
               errc_name(s.code()));
  }
  if (d.relist) {
    d.relist = false;
    enqueue_list(w.path, d);
  }
}

// A new lock node enters the index from its name alone; invariant (4) then
// decides whether it (and the rest of its queue) is read.
void Mirror::Core::apply_children(const std::string& path, Dir& d, const std::vector<std::string>& children) {
  std::set<std::string> locks, subdirs;
  for (const auto& name : children) {
    if (auto q = model::queue_node_from_name(name)) {
      locks.insert(name);
      if (d.locks.count(name)) continue;
      if (nodes.try_emplace(child_path(path, name), Node{path}).second) index.insert(path, std::move(*q));
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
  read_contended(path, d);
}

// Invariant (4): a queue of two or more nodes has every node read or being
// read. A lone queue costs its listing only.
void Mirror::Core::read_contended(const std::string& path, const Dir& d) {
  if (d.locks.size() < 2) return;
  for (const auto& name : d.locks) {
    const auto full = child_path(path, name);
    if (auto it = nodes.find(full); it != nodes.end()) enqueue_get(full, it->second, d);
  }
}

void Mirror::Core::on_get(const Work& w, Status s, const std::string& data, const Stat& st) {
  std::function<void()> notify;
  {
    std::lock_guard lock(mu);
    --inflight;
    if (current(w)) {
      auto it = nodes.find(w.path);
      if (it != nodes.end()) {
        Node& n = it->second;
        n.reading = false;
        const auto name = child_name(n.lock, w.path);
        if (s.ok()) {
          n.have_stat = true;
          auto decoded = protocol::decode_node_data(data);
          if (decoded && protocol::owner_key(decoded->owner) == protocol::parse_lock_node_name(name)->owner_key) {
            index.set_read(n.lock, name, st.czxid, st.ctime, std::move(decoded->owner), decoded->priority,
                           decoded->gives_up_after_ms);
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
          // Gone before its read: its Dir's watch reports it too.
          const auto lock_path = n.lock;
          if (auto d = dirs.find(lock_path); d != dirs.end()) d->second.locks.erase(name);
          erase_node(lock_path, name);
        } else {
          sessions[w.session]->retry.push_back(n.lock);  // its listing reads it again
          log->debug("mirror: reading {} failed: {}; retried at the next listing of its lock path", w.path,
                     errc_name(s.code()));
        }
      }
    }
  }
  if (notify) notify();
  pump();
}

}  // namespace zklock::detector
