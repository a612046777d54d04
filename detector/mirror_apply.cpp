// Applying the mirror's replies: a directory's listing (diffed against what
// the mirror had) and a lock node's read.
#include <algorithm>

#include <spdlog/spdlog.h>

#include "detector/mirror_core.hpp"
#include "zklock/protocol/node_data.hpp"

namespace zklock::detector {

Mirror::Core::NodeState* Mirror::Core::Dir::lock(const std::string& name) {
  auto it = std::lower_bound(locks.begin(), locks.end(), name,
                             [](const auto& e, const std::string& n) { return e.first < n; });
  return it != locks.end() && it->first == name ? &it->second : nullptr;
}

bool Mirror::Core::Dir::has_subdir(const std::string& name) const {
  return std::binary_search(subdirs.begin(), subdirs.end(), name);
}

// The one way a lock node leaves the index (its Dir's `locks` entry goes
// with it, in the caller).
void Mirror::Core::erase_node(const std::string& dir, const std::string& name) { index.erase(dir, name); }

void Mirror::Core::drop_content(const std::string& path, Dir& d) {
  for (const auto& [name, _] : d.locks) erase_node(path, name);
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
  decltype(d.locks) locks;
  decltype(d.subdirs) subdirs;
  for (const auto& name : children) {
    if (auto q = model::queue_node_from_name(name)) {
      if (const auto* had = d.lock(name)) {
        locks.emplace_back(name, *had);
      } else if (index.insert(path, std::move(*q))) {
        locks.emplace_back(name, NodeState{});
      }
      continue;
    }
    if (d.has_subdir(name)) {
      subdirs.push_back(name);
      continue;
    }
    if (d.depth + 1 > opt.max_depth) {
      ++stats.skipped_dirs;
      log->warn("mirror: not descending into {}: deeper than --max-depth {}", child_path(path, name),
                opt.max_depth);
      continue;
    }
    subdirs.push_back(name);
    const auto full = child_path(path, name);
    auto& sub = dirs[full];
    sub.depth = d.depth + 1;
    enqueue_list(full, sub);
  }
  std::sort(locks.begin(), locks.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::sort(subdirs.begin(), subdirs.end());
  for (const auto& [name, _] : d.locks) {
    auto it = std::lower_bound(locks.begin(), locks.end(), name,
                               [](const auto& e, const std::string& n) { return e.first < n; });
    if (it == locks.end() || it->first != name) erase_node(path, name);
  }
  for (const auto& name : d.subdirs) {
    if (!std::binary_search(subdirs.begin(), subdirs.end(), name)) forget_subtree(child_path(path, name));
  }
  d.locks = std::move(locks);
  d.subdirs = std::move(subdirs);
  read_contended(path, d);
}

// Invariant (4): a queue of two or more nodes has every node read or being
// read. A lone queue costs its listing only.
void Mirror::Core::read_contended(const std::string& path, Dir& d) {
  if (d.locks.size() < 2) return;
  for (auto& [name, n] : d.locks) enqueue_get(child_path(path, name), n, d);
}

void Mirror::Core::on_get(const Work& w, Status s, const std::string& data, const Stat& st) {
  std::function<void()> notify;
  {
    std::lock_guard lock(mu);
    --inflight;
    if (current(w)) {
      auto [lock_path, name] = split(w.path);
      auto dir = dirs.find(lock_path);
      NodeState* found = dir != dirs.end() ? dir->second.lock(name) : nullptr;
      if (found) {
        NodeState& n = *found;
        n.reading = false;
        if (s.ok()) {
          n.have_stat = true;
          auto decoded = protocol::decode_node_data(data);
          if (decoded && protocol::owner_key(decoded->owner) == protocol::parse_lock_node_name(name)->owner_key) {
            index.set_read(lock_path, name, st.czxid, st.ctime, std::move(decoded->owner), decoded->priority,
                           decoded->gives_up_after_ms);
          } else {
            index.set_read(lock_path, name, st.czxid, st.ctime, {}, 0);
            ++stats.bad_data;
            log->warn("mirror: {}: node data ({} bytes) is malformed, oversized or names another owner; "
                      "owner taken from the node name",
                      w.path, data.size());
          }
          if (opt.on_node_added) {
            notify = [cb = opt.on_node_added, lock = lock_path, ctime = st.ctime] { cb(lock, ctime); };
          }
        } else if (s.is(Errc::no_node)) {
          // Gone before its read: its Dir's watch reports it too.
          std::erase_if(dir->second.locks, [&](const auto& e) { return e.first == name; });
          erase_node(lock_path, name);
        } else {
          sessions[w.session]->retry.push_back(lock_path);  // its listing reads it again
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
