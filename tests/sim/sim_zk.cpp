#include "sim_zk.hpp"

#include <algorithm>
#include <cstdio>
#include <stdexcept>

namespace zklock::sim {
namespace {

std::string parent_of(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == 0 ? "/" : path.substr(0, slash);
}
std::string base_of(const std::string& path) { return path.substr(path.rfind('/') + 1); }

// ZooKeeper's "%010d" of the signed counter.
std::string suffix(std::int32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%010d", v);
  return buf;
}

std::int32_t plus_one(std::int32_t v) {  // int32 wrap, as Java's int
  return static_cast<std::int32_t>(static_cast<std::uint32_t>(v) + 1U);
}

[[noreturn]] void model_bug(const std::string& what) { throw std::logic_error("sim_zk model bug: " + what); }

}  // namespace

const char* zrc_name(Zrc rc) {
  switch (rc) {
    case Zrc::ok: return "ok";
    case Zrc::no_node: return "no_node";
    case Zrc::node_exists: return "node_exists";
    case Zrc::not_empty: return "not_empty";
    case Zrc::bad_version: return "bad_version";
    case Zrc::connection_loss: return "connection_loss";
    case Zrc::session_expired: return "session_expired";
  }
  return "?";
}

void SimZk::seed_node(const std::string& path, bool container, std::int32_t cversion) {
  if (tree_.empty()) tree_["/"] = Node{};
  Node n;
  n.czxid = n.mzxid = ++zxid_;
  n.container = container;
  n.cversion = cversion;
  tree_[path] = n;
  auto& parent = tree_.at(parent_of(path));
  parent.children.insert(base_of(path));
  parent.had_children = true;
}

std::uint64_t SimZk::open_session() {
  sessions_[++next_session_] = Session{};
  return next_session_;
}

bool SimZk::session_alive(std::uint64_t s) const {
  auto it = sessions_.find(s);
  return it != sessions_.end() && it->second.alive;
}

bool SimZk::connected(std::uint64_t s) const { return session_alive(s) && sessions_.at(s).connected; }

const Node* SimZk::find(const std::string& path) const {
  auto it = tree_.find(path);
  return it == tree_.end() ? nullptr : &it->second;
}

void SimZk::send(Request req) {
  req.id = ++next_req_;
  if (req.session == 0) {
    prepare(req);
    return;
  }
  auto& ss = sessions_.at(req.session);
  if (!ss.alive || !ss.connected) model_bug("send on a disconnected session");
  ss.unanswered.insert(req.id);
  if ((req.kind == ReqKind::exists || req.kind == ReqKind::get_data || req.kind == ReqKind::get_children) &&
      req.watch) {
    ss.watch_paths[req.id] = {req.path, req.kind == ReqKind::get_children};
  }
  ss.outbound.push_back(std::move(req));
}

bool SimZk::can_serve(std::uint64_t s) const {
  if (!connected(s)) return false;
  const auto& ss = sessions_.at(s);
  return !ss.outbound.empty() && (ss.outbound.front().is_write() || ss.uncommitted == 0);
}

// Lost writes "applied later" run after the session's next read (a follower
// answering ahead of a forwarded write) but before its next write.
void SimZk::serve(std::uint64_t s) {
  auto& ss = sessions_.at(s);
  Request r = std::move(ss.outbound.front());
  ss.outbound.pop_front();
  auto flush_limbo = [&] {
    for (auto& l : std::exchange(ss.limbo, {})) {
      prepare(l);
      pipeline_.back().answer = false;
    }
  };
  if (r.is_write()) {
    flush_limbo();
    prepare(r);
  } else {
    serve_read(r);
    flush_limbo();
  }
}

void SimZk::serve_read(const Request& r) {
  Reply rep;
  rep.cookie = r.cookie;
  const Node* n = find(r.path);
  rep.rc = n ? Zrc::ok : Zrc::no_node;
  if (n) {
    rep.czxid = n->czxid;
    rep.data = n->data;
    if (r.kind == ReqKind::get_children) {
      rep.children.assign(n->children.begin(), n->children.end());
      for (std::size_t i = rep.children.size(); i > 1; --i) std::swap(rep.children[i - 1], rep.children[rng_.below(i)]);
    }
  }
  // exists watches a missing node for its creation; getData watches only a node that exists.
  if (r.watch && (r.kind == ReqKind::exists || (r.kind == ReqKind::get_data && n))) {
    watches_[r.path].push_back(Watch{r.session, r.cookie, false});
  }
  if (r.kind == ReqKind::get_children && r.watch && n) {
    auto& ws = child_watches_[r.path];
    ws.push_back(Watch{r.session, r.cookie, false});
    const auto mine = std::count_if(ws.begin(), ws.end(), [&](const Watch& w) { return w.session == r.session; });
    stats_.max_child_watches = std::max<std::uint64_t>(stats_.max_child_watches, static_cast<std::uint64_t>(mine));
  }
  answer(r.session, r.id, std::move(rep));
}

std::optional<SimZk::Pending> SimZk::effective(const std::string& path,
                                               const std::map<std::string, Pending>& scratch) const {
  if (auto it = scratch.find(path); it != scratch.end()) return it->second;
  if (auto it = pending_.find(path); it != pending_.end()) return it->second;
  if (auto it = tree_.find(path); it != tree_.end()) {
    return Pending{true, it->second.cversion, static_cast<std::int32_t>(it->second.children.size()), it->second.owner, 0,
                   it->second.version};
  }
  return std::nullopt;
}

Zrc SimZk::prep_create(const std::string& path0, const Request& req, bool sequential, bool ephemeral, bool container,
                       Txn& txn, std::map<std::string, Pending>& scratch) {
  const std::string parent = parent_of(path0);
  auto p = effective(parent, scratch);
  if (!p || !p->exists) return Zrc::no_node;
  std::string path = path0;
  if (sequential) {
    // 3.8.0: the suffix is the latest (pending or committed) cversion.
    if (scratch.count(parent) || pending_.count(parent)) ++stats_.overlapping_creates;
    if (p->cversion < 0) ++stats_.negative_suffixes;
    path += suffix(p->cversion);
  }
  if (auto n = effective(path, scratch); n && n->exists) return Zrc::node_exists;
  p->cversion = plus_one(p->cversion);
  p->children += 1;
  scratch[parent] = *p;
  scratch[path] = Pending{true, 0, 0, ephemeral ? req.session : 0, 0, 0};
  txn.ops.push_back(Op{Op::create, path, req.data, ephemeral ? req.session : 0, container, p->cversion});
  txn.created_name = base_of(path);
  return Zrc::ok;
}

Zrc SimZk::prep_delete(const std::string& path, bool only_container, Txn& txn,
                       std::map<std::string, Pending>& scratch) {
  auto n = effective(path, scratch);
  if (!n || !n->exists) return Zrc::no_node;
  if (n->children > 0) return Zrc::not_empty;
  if (only_container) {
    const Node* node = find(path);
    if (!node || !node->container || !node->had_children || pending_.count(path)) return Zrc::not_empty;
  }
  const std::string parent = parent_of(path);
  auto p = effective(parent, scratch);
  if (!p || !p->exists) model_bug("delete of " + path + " without a parent");
  if (opts_.delete_bumps_cversion) p->cversion = plus_one(p->cversion);
  p->children -= 1;
  scratch[parent] = *p;
  scratch[path] = Pending{false, 0, 0, 0, 0, 0};
  txn.ops.push_back(Op{Op::remove, path, {}, 0, false, p->cversion});
  return Zrc::ok;
}

Zrc SimZk::prepare_ops(const Request& r, Txn& t, std::map<std::string, Pending>& scratch) {
  switch (r.kind) {
    case ReqKind::create: return prep_create(r.path, r, r.sequential, r.ephemeral, r.container, t, scratch);
    case ReqKind::remove: return prep_delete(r.path, false, t, scratch);
    case ReqKind::reap: return prep_delete(r.path, true, t, scratch);
    case ReqKind::multi_release: {
      if (auto rc = prep_delete(r.path, false, t, scratch); rc != Zrc::ok) return rc;
      auto n = effective(r.path2, scratch);
      if (!n || !n->exists) return Zrc::no_node;
      t.ops.push_back(Op{Op::set_data, r.path2, r.data, 0, false, 0});
      return Zrc::ok;
    }
    case ReqKind::set_data: {
      auto n = effective(r.path, scratch);
      if (!n || !n->exists) return Zrc::no_node;
      if (r.version != -1 && n->version != r.version) return Zrc::bad_version;
      n->version += 1;
      scratch[r.path] = *n;
      t.new_version = n->version;
      t.ops.push_back(Op{Op::set_data, r.path, r.data, 0, false, 0});
      return Zrc::ok;
    }
    case ReqKind::multi_revoke: {
      if (auto rc = prep_delete(r.path, false, t, scratch); rc != Zrc::ok) return rc;
      Request rec = r;
      rec.session = 0;
      return prep_create(r.path2, rec, false, false, false, t, scratch);
    }
    default: model_bug("prepare of a read");
  }
}

void SimZk::prepare(const Request& req) {
  Txn t;
  t.zxid = ++zxid_;
  t.req = req;
  std::map<std::string, Pending> scratch;
  t.rc = prepare_ops(req, t, scratch);
  if (t.rc == Zrc::ok) {
    for (auto& [path, rec] : scratch) {
      rec.zxid = t.zxid;
      pending_[path] = rec;
      t.touched.push_back(path);
    }
  } else {
    t.ops.clear();  // a multi fails as a whole
  }
  if (req.session != 0) ++sessions_.at(req.session).uncommitted;
  pipeline_.push_back(std::move(t));
  stats_.max_pipeline = std::max<std::uint64_t>(stats_.max_pipeline, pipeline_.size());
}

void SimZk::apply(const Op& op, const Txn& t) {
  const std::int64_t zxid = t.zxid;
  const std::string parent_path = parent_of(op.path);
  auto pit = tree_.find(parent_path);
  if (op.kind != Op::set_data && pit == tree_.end()) model_bug("no parent at commit: " + op.path);
  auto set_cversion = [&](Node& parent) {
    if (opts_.wrap || op.parent_cversion > parent.cversion) parent.cversion = op.parent_cversion;
  };
  switch (op.kind) {
    case Op::create: {
      if (tree_.count(op.path)) model_bug("create of an existing node at commit: " + op.path);
      Node n;
      n.data = op.data;
      n.czxid = n.mzxid = zxid;
      n.owner = op.owner;
      n.container = op.container;
      tree_[op.path] = std::move(n);
      auto& parent = tree_.at(parent_path);
      parent.children.insert(base_of(op.path));
      parent.had_children = true;
      set_cversion(parent);
      if (op.owner) sessions_.at(op.owner).ephemerals.insert(op.path);
      fire(op.path, Reply::Watch::created);
      fire_children(parent_path);
      break;
    }
    case Op::remove: {
      auto it = tree_.find(op.path);
      if (it == tree_.end() || !it->second.children.empty()) model_bug("bad delete at commit: " + op.path);
      if (it->second.owner) sessions_.at(it->second.owner).ephemerals.erase(op.path);
      tree_.erase(it);
      auto& parent = pit->second;
      parent.children.erase(base_of(op.path));
      set_cversion(parent);
      deleted_.push_back(Deleted{op.path, t.req.session, t.req.kind, t.close_session, t.req.cookie});
      fire(op.path, Reply::Watch::deleted);
      fire_children(parent_path);
      break;
    }
    case Op::set_data: {
      auto it = tree_.find(op.path);
      if (it == tree_.end()) model_bug("setData of a missing node at commit: " + op.path);
      it->second.data = op.data;
      it->second.mzxid = zxid;
      ++it->second.version;
      fire(op.path, Reply::Watch::changed);
      break;
    }
  }
}

void SimZk::commit() {
  Txn t = std::move(pipeline_.front());
  pipeline_.pop_front();
  ++stats_.commits;
  for (const auto& op : t.ops) apply(op, t);
  for (const auto& path : t.touched) {
    if (auto it = pending_.find(path); it != pending_.end() && it->second.zxid == t.zxid) pending_.erase(it);
  }
  if (t.close_session || t.req.session == 0) return;
  auto& ss = sessions_.at(t.req.session);
  --ss.uncommitted;
  if (!t.answer || !ss.alive || !ss.connected) return;
  Reply rep;
  rep.cookie = t.req.cookie;
  rep.rc = t.rc;
  if (t.rc == Zrc::ok && t.req.kind == ReqKind::create) {
    rep.name = t.created_name;
    rep.czxid = t.zxid;
  }
  if (t.rc == Zrc::ok && t.req.kind == ReqKind::set_data) {
    rep.mzxid = t.zxid;
    rep.version = t.new_version;
  }
  answer(t.req.session, t.req.id, std::move(rep));
}

void SimZk::fire(const std::string& path, Reply::Watch what) {
  auto it = watches_.find(path);
  if (it == watches_.end()) return;
  for (const auto& w : it->second) {
    Reply rep;
    rep.notification = true;
    rep.what = what;
    rep.cookie = w.cookie;
    answer(w.session, 0, std::move(rep));
  }
  watches_.erase(it);
}

void SimZk::fire_children(const std::string& parent) {
  auto it = child_watches_.find(parent);
  if (it == child_watches_.end()) return;
  for (const auto& w : it->second) {
    Reply rep;
    rep.notification = true;
    rep.what = Reply::Watch::children;
    rep.cookie = w.cookie;
    answer(w.session, 0, std::move(rep));
  }
  child_watches_.erase(it);
}

void SimZk::answer(std::uint64_t s, std::uint64_t req_id, Reply r) {
  auto& ss = sessions_.at(s);
  if (!ss.alive) return;
  ss.deliveries.emplace_back(req_id, std::move(r));
}

bool SimZk::can_deliver(std::uint64_t s) const { return connected(s) && !sessions_.at(s).deliveries.empty(); }

bool SimZk::quiet(std::uint64_t s) const {
  if (!connected(s)) return false;
  const auto& ss = sessions_.at(s);
  return ss.outbound.empty() && ss.limbo.empty() && ss.unanswered.empty() && ss.deliveries.empty() &&
         ss.uncommitted == 0;
}

Reply SimZk::deliver(std::uint64_t s) {
  auto& ss = sessions_.at(s);
  auto [id, rep] = std::move(ss.deliveries.front());
  ss.deliveries.pop_front();
  if (id != 0) {
    ss.unanswered.erase(id);
    if (auto it = ss.watch_paths.find(id); it != ss.watch_paths.end()) {
      auto& table = it->second.second ? child_watches_ : watches_;
      for (auto& w : table[it->second.first]) {
        if (w.session == s && w.cookie == rep.cookie) w.confirmed = true;
      }
      if (table[it->second.first].empty()) table.erase(it->second.first);
      ss.watch_paths.erase(it);
    }
  }
  return rep;
}

void SimZk::reconnect(std::uint64_t s) {
  auto& ss = sessions_.at(s);
  if (!ss.alive) model_bug("reconnect of an expired session");
  ss.connected = true;
}

void SimZk::expire(std::uint64_t s) {
  auto& ss = sessions_.at(s);
  if (!ss.alive) return;
  // One closeSession transaction deletes every ephemeral of the session,
  // including those whose creates are prepared but not yet committed.
  Txn t;
  t.zxid = ++zxid_;
  t.close_session = true;
  t.req.session = s;
  t.req.kind = ReqKind::remove;
  std::set<std::string> paths = ss.ephemerals;
  for (const auto& [path, rec] : pending_) {
    if (rec.exists && rec.owner == s) paths.insert(path);
  }
  std::map<std::string, Pending> scratch;
  for (const auto& path : paths) {
    if (auto n = effective(path, scratch); n && n->exists) {
      if (prep_delete(path, false, t, scratch) != Zrc::ok) model_bug("closeSession cannot delete " + path);
    }
  }
  for (auto& [path, rec] : scratch) {
    rec.zxid = t.zxid;
    pending_[path] = rec;
    t.touched.push_back(path);
  }
  pipeline_.push_back(std::move(t));
  for (auto& tx : pipeline_) {
    if (tx.req.session == s) tx.answer = false;
  }
  ss.alive = ss.connected = false;
  ss.outbound.clear();
  ss.limbo.clear();
  ss.deliveries.clear();
  ss.unanswered.clear();
  for (auto* table : {&watches_, &child_watches_}) {
    for (auto it = table->begin(); it != table->end();) {
      std::erase_if(it->second, [&](const Watch& w) { return w.session == s; });
      it = it->second.empty() ? table->erase(it) : std::next(it);
    }
  }
}

}  // namespace zklock::sim
