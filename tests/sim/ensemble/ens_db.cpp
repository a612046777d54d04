// The ensemble simulator's data tree (ens_world.hpp): each server's nodes as
// its applied log leaves them, the reads it answers from them, and the
// watches of its connected clients.
//
// Every server applies the same committed log in the same order, so a
// write's outcome (a sequential suffix, no_node, a bad version) computed at
// apply is the one the leader would have prepared. A read sees only what
// its own server has applied: a follower behind the leader answers from the
// past, which is what the lock recipe must survive.
#include <cstdio>
#include <string>

#include "ens_world.hpp"

namespace zklock::ensim {

namespace {
std::string parent_of(const std::string& path) { return path.substr(0, path.rfind('/')); }
std::string leaf_of(const std::string& path) { return path.substr(path.rfind('/') + 1); }
std::string suffix(std::int32_t v) {  // ZooKeeper's "%010d"
  char buf[16];
  std::snprintf(buf, sizeof buf, "%010d", v);
  return buf;
}
}  // namespace

// The db before the first transaction: the locks (persistent) and the
// revocation records' parent exist from the start.
void World::reset_db(Server& sv) {
  sv.sessions.clear();
  sv.tree.clear();
  sv.tree["/locks"];
  sv.tree["/zklock/revocations"];
  for (const auto& l : locks_) {
    sv.tree["/locks"].children.insert(leaf_of(l));
    sv.tree[l];
  }
}

void World::apply(int s, std::size_t upto, bool effects) {
  Server& sv = servers_[static_cast<std::size_t>(s)];
  for (; sv.applied < upto && sv.applied < sv.log.size(); ++sv.applied) {
    const Txn& t = sv.log[sv.applied];
    std::vector<std::pair<std::string, bool>> fired;  // (path, children watch?)
    Answer ans;
    switch (t.kind) {
      case TxnKind::create_session: sv.sessions.insert(t.session); break;
      case TxnKind::close_session: {
        sv.sessions.erase(t.session);
        sv.tracker.erase(t.session);
        std::vector<std::string> mine;
        for (const auto& [path, n] : sv.tree) {
          if (n.owner == t.session) mine.push_back(path);
        }
        for (const auto& path : mine) {
          Txn del = t;
          del.op.path = path;
          del.kind = TxnKind::delete_node;
          apply_node_txn(sv, del, fired);
        }
        break;
      }
      case TxnKind::heartbeat: ans.rc = rc_no_node; break;  // setData on a node that does not exist: an error txn
      case TxnKind::create_node:
      case TxnKind::delete_node:
      case TxnKind::release_node:
      case TxnKind::probe_node:
      case TxnKind::revoke_node: ans = apply_node_txn(sv, t, fired); break;
    }
    // Committed wherever it is applied (a new leader's and a syncing
    // follower's applies have no effects, but the revocation happened).
    if (t.kind == TxnKind::revoke_node && !fired.empty() && revoked_.insert(t.op.path).second) ++res_.c.revocations;
    if (!effects) continue;
    fire(s, fired);
    if (t.kind == TxnKind::close_session) {
      for (const auto& [c, session] : std::map<int, std::uint64_t>(sv.clients)) {
        if (session == t.session) close_client(s, c, true);
      }
    }
    if (t.origin != s) continue;
    ans.zxid = t.zxid;
    if (t.kind == TxnKind::create_session) finish_connect(s, t.req, t.session, true);
    else answer_at(s, t.req, ans);
  }
}

Answer World::apply_node_txn(Server& sv, const Txn& t, std::vector<std::pair<std::string, bool>>& fired) {
  Answer a;
  const auto zxid = static_cast<std::int64_t>(t.zxid);
  const std::string& path = t.op.path;
  auto it = sv.tree.find(path);
  auto remove = [&](const std::string& p) {
    sv.tree.erase(p);
    ZNode& parent = sv.tree[parent_of(p)];
    parent.children.erase(leaf_of(p));
    parent.pzxid = zxid;  // a delete changes pzxid, never cversion (3.8.0)
    fired.emplace_back(p, false);
    fired.emplace_back(parent_of(p), true);
  };
  switch (t.kind) {
    case TxnKind::create_node: {
      const auto pit = sv.tree.find(parent_of(path));
      if (!sv.sessions.count(t.session)) {
        a.rc = rc_expired;
      } else if (pit == sv.tree.end()) {
        a.rc = rc_no_node;
      } else {
        ZNode& parent = pit->second;
        const std::string full = path + suffix(parent.cversion++);
        parent.pzxid = zxid;
        parent.children.insert(leaf_of(full));
        ZNode& n = sv.tree[full];
        n.czxid = n.mzxid = n.pzxid = zxid;
        n.owner = t.session;
        n.data = t.op.data;
        a.name = leaf_of(full);
        a.czxid = zxid;
        fired.emplace_back(parent_of(path), true);
      }
      break;
    }
    case TxnKind::delete_node:
      if (it == sv.tree.end()) a.rc = rc_no_node;
      else remove(path);
      break;
    case TxnKind::release_node:  // multi: delete the node, then setData(lock, marker); all or nothing
      if (it == sv.tree.end()) {
        a.rc = rc_no_node;
      } else {
        remove(path);
        ZNode& lock = sv.tree[parent_of(path)];
        lock.data = t.op.data;
        lock.mzxid = zxid;
        fired.emplace_back(parent_of(path), false);
      }
      break;
    case TxnKind::probe_node: a.rc = it == sv.tree.end() ? rc_no_node : rc_bad_version; break;
    case TxnKind::revoke_node:  // the detector's multi: the record, then the delete
      if (it != sv.tree.end()) {
        ZNode& rec = sv.tree["/zklock/revocations/" + leaf_of(path)];
        rec.czxid = rec.mzxid = zxid;
        rec.data = t.op.data;
        sv.tree["/zklock/revocations"].children.insert(leaf_of(path));
        remove(path);
      }
      break;
    case TxnKind::create_session:
    case TxnKind::close_session:
    case TxnKind::heartbeat: break;
  }
  return a;
}

// A read at server s, from its applied state; a watch is left as 3.8.0
// leaves it (getData and exists on a missing node: none here, as the shell
// never asks exists with a watch; getChildren: on the parent).
Answer World::read(int s, int client, std::uint64_t req, const Op& op) {
  Server& sv = servers_[static_cast<std::size_t>(s)];
  Answer a;
  a.zxid = sv.last_zxid();
  const auto it = sv.tree.find(op.path);
  if (it == sv.tree.end()) {
    a.rc = rc_no_node;
    return a;
  }
  a.czxid = it->second.czxid;
  if (op.kind == k_children) a.children.assign(it->second.children.begin(), it->second.children.end());
  if (op.kind == k_get_data) a.data = it->second.data;
  if (op.watch) (op.kind == k_children ? sv.child_watches : sv.data_watches)[op.path].insert({client, req});
  return a;
}

// One-shot: each watch on a changed path is told to its client (if still
// connected here) and dropped.
void World::fire(int s, const std::vector<std::pair<std::string, bool>>& fired) {
  Server& sv = servers_[static_cast<std::size_t>(s)];
  for (const auto& [path, children] : fired) {
    auto& table = children ? sv.child_watches : sv.data_watches;
    const auto it = table.find(path);
    if (it == table.end()) continue;
    const auto who = std::move(it->second);
    table.erase(it);
    const bool deleted = !sv.tree.count(path);
    for (const auto& [c, id] : who) {
      if (!sv.clients.count(c)) continue;
      const int cc = c;
      const auto wid = id;
      const bool ch = children;
      send(s, cc, [this, cc, wid, ch, deleted] { on_notify(cc, wid, ch, deleted); });
    }
  }
}

// setWatches after a reconnect: a data watch whose node is gone or changed
// since the client's last zxid fires now; a children watch whose parent's
// children changed since then fires now; the rest are registered here.
void World::set_watches(int s, int client, std::uint64_t last_zxid, std::vector<WatchRec> watches) {
  Server& sv = servers_[static_cast<std::size_t>(s)];
  if (sv.role == Role::looking || !sv.clients.count(client)) return;
  const auto rel = static_cast<std::int64_t>(last_zxid);
  for (const auto& w : watches) {
    const auto it = sv.tree.find(w.path);
    const bool gone = it == sv.tree.end();
    const bool now = gone || (w.children ? it->second.pzxid > rel : it->second.mzxid > rel);
    if (!now) {
      (w.children ? sv.child_watches : sv.data_watches)[w.path].insert({client, w.id});
      continue;
    }
    const auto id = w.id;
    const bool ch = w.children;
    send(s, client, [this, client, id, ch, gone] { on_notify(client, id, ch, gone); });
  }
}

}  // namespace zklock::ensim
