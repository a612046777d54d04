// The simulator's shell, the counterpart of lib/src/lock_attempt.cpp: it
// turns each machine command into requests on the machine's session and
// each reply into the machine's event; and the actors, the users of locks.
#include <algorithm>

#include "model/queue_order.hpp"
#include "sim_world.hpp"

namespace zklock::sim {

using detail::MachineRequest;
using detail::MachineOutcome;
using detail::MachineEvent;
using detail::Rc;
using Kind = MachineEvent::Kind;
using Cmd = MachineRequest::Kind;

namespace {

Rc to_rc(Zrc rc) {
  switch (rc) {
    case Zrc::ok: return Rc::ok;
    case Zrc::no_node: return Rc::no_node;
    case Zrc::node_exists: return Rc::node_exists;
    case Zrc::connection_loss: return Rc::connection_loss;
    case Zrc::session_expired: return Rc::session_expired;
    case Zrc::not_empty: return Rc::error;
    case Zrc::bad_version: return Rc::error;
  }
  return Rc::error;
}

const char* rc_name(Rc rc) {
  static const char* names[] = {"ok", "no_node", "node_exists", "connection_loss", "session_expired", "error"};
  return names[static_cast<int>(rc)];
}
const char* event_name(Kind k) {
  static const char* names[] = {"created", "parents_made", "listed", "stats_read", "blocker_checked", "marker_read",
                                "own_checked", "record_read", "removed", "blocker_probed", "blocker_deleted",
                                "own_deleted", "own_changed", "children_changed", "disconnected", "reconnected",
                                "expired", "validity_expired", "validity_proven", "watchdog", "cancel", "release", "retake",
                                "retain_over"};
  return names[static_cast<int>(k)];
}
const char* command_name(Cmd k) {
  static const char* names[] = {"create", "make_parents", "list", "list_watch", "read_stats",
                                "watch_blocker", "read_marker", "watch_own", "read_record", "remove", "remove_extra",
                                "probe_blocker"};
  return names[static_cast<int>(k)];
}
const char* outcome_name(MachineOutcome::Kind k) {
  static const char* names[] = {"granted", "failed", "lost", "released", "retake_void", "notice", "diverged"};
  return names[static_cast<int>(k)];
}
std::string hex64(std::uint64_t v) {
  static const char* d = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = d[v & 15];
  return s;
}
std::string short_name(const std::string& name) {  // w_<key>_<guid>_<seq> -> w_<guid:6>_<seq>
  auto p = protocol::parse_lock_node_name(name);
  if (!p) return name;
  return name.substr(0, 2) + p->guid.substr(0, 6) + "_" + std::to_string(p->sequence);
}

}  // namespace

int World::start_machine(int actor, int lock, Mode mode) {
  auto& a = actors_[static_cast<std::size_t>(actor)];
  MachineRec rec;
  rec.lock = lock;
  rec.actor = actor;
  rec.session = slots_[static_cast<std::size_t>(a.slot)].sid;
  rec.guid = hex64(rng_.next()) + hex64(rng_.next());
  detail::MachineConfig mc;
  mc.mode = mode;
  mc.guid = rec.guid;
  mc.holder.policy = a.policy;
  mc.epoch = rec.session;
  mc.lock_path = locks_[static_cast<std::size_t>(lock)];
  mc.retain = a.retains;
  // Either memory of the previous acquisition (the shell's seen_before), taken
  // from the GUID's random bits so the seeds' random streams are unchanged:
  // free lists with the children watch, and then (6) stands on it.
  mc.history = rec.guid.back() < '8' ? detail::LockHistory::free : detail::LockHistory::contended;
  rec.m = std::make_unique<detail::LockMachine>(mc);
  machines_.push_back(std::move(rec));
  const int id = static_cast<int>(machines_.size()) - 1;
  by_guid_[machines_.back().guid.substr(0, 24)] = id;  // the attempt part of every create's GUID
  slots_[static_cast<std::size_t>(a.slot)].machines.push_back(id);
  a.ms.push_back(id);
  ++counters_.machines;
  if (cfg_.trace || cfg_.print_trace) {
    note("m" + std::to_string(id) + " START " + a.owner + " " + std::string(mode_name(mode)) + " " + mc.lock_path +
         " session " + std::to_string(machines_.back().session) + " guid " + machines_.back().guid.substr(0, 6));
  }
  apply(id, machines_.back().m->start());
  return id;
}

void World::feed(int id, MachineEvent ev) {
  auto& rec = machines_[static_cast<std::size_t>(id)];
  // The shell's clock against the validity bound (a retake brings its own):
  // lapsed once disconnected past it until a proof on a connection, and now
  // and then anyway (a pause, a heartbeat late under load).
  if (ev.kind != Kind::retake) {
    for (const auto& s : slots_) {
      if (s.sid == rec.session) ev.within_bound = !s.validity_sent && !rng_.chance(20);
    }
  }
  if (cfg_.trace || cfg_.print_trace) {
    std::string l = "m" + std::to_string(id) + " <- " + event_name(ev.kind);
    if (ev.tag) l += " tag=" + std::to_string(ev.tag);
    if (ev.is_answer()) l += std::string(" ") + rc_name(ev.rc);
    if (!ev.name.empty()) l += " " + short_name(ev.name) + " czxid=" + std::to_string(ev.czxid);
    for (const auto& c : ev.children) l += " " + short_name(c);
    for (const auto& st : ev.stats) l += std::string(" [") + rc_name(st.rc) + " " + std::to_string(st.czxid) + "]";
    if (ev.kind == Kind::marker_read && ev.rc == Rc::ok) l += " data=" + short_name(ev.data);
    if (ev.kind == Kind::retake) {
      l += ev.within_bound ? " within_bound" : " bound_lapsed";
      if (!ev.confirmed) l += " unconfirmed";
    } else if (!ev.within_bound) {
      l += " bound_lapsed";
    }
    note(l);
  }
  const bool was_proving = rec.m->phase() == detail::LockMachine::Phase::proving;
  const bool outer = std::exchange(bound_now_, ev.within_bound || ev.no_bound);
  apply(id, rec.m->step(ev));
  bound_now_ = outer;
  if (was_proving) {
    const auto p = machines_[static_cast<std::size_t>(id)].m->phase();
    if (p == detail::LockMachine::Phase::held) ++counters_.proved_later;
    if (p == detail::LockMachine::Phase::failed) ++counters_.withdrawn;
  }
}

// Requests first, then outcomes, as the shell does (MachineCommands).
void World::apply(int id, const detail::MachineCommands& cmds) {
  for (const auto& r : cmds.requests) execute(id, r);
  for (const auto& o : cmds.outcomes) {
    if (cfg_.trace || cfg_.print_trace) {
      std::string l = "m" + std::to_string(id) + " -> " + outcome_name(o.kind);
      if (o.kind == MachineOutcome::Kind::granted) l += " token=" + token_text({o.token, o.ordinal});
      if (!o.message.empty()) l += " (" + o.message + ")";
      note(l);
    }
    on_outcome(id, o);
  }
}

void World::execute(int id, const MachineRequest& c) {
  auto& rec = machines_[static_cast<std::size_t>(id)];
  const auto& lock = locks_[static_cast<std::size_t>(rec.lock)];
  if (cfg_.trace || cfg_.print_trace) {
    std::string l = "m" + std::to_string(id) + " -> " + command_name(c.kind);
    if (c.tag) l += " tag=" + std::to_string(c.tag);
    if (!c.name.empty()) l += " " + short_name(c.name);
    for (const auto& n : c.names) l += " " + short_name(n);
    if (c.with_marker) l += " +marker";
    note(l);
  }
  Route rt{id, c.tag, Kind::created};
  Request r;
  switch (c.kind) {
    case Cmd::create: {
      const auto& a = actors_[static_cast<std::size_t>(rec.actor)];
      r.kind = ReqKind::create;
      r.path = lock + "/" + protocol::lock_node_prefix(rec.m->config().mode, protocol::owner_key(a.owner), c.name);  // a GUID per create
      r.sequential = r.ephemeral = true;
      r.data = a.owner;
      submit(id, std::move(r), rt);
      return;
    }
    case Cmd::make_parents: {  // each ancestor, top down, as a container
      std::vector<std::string> paths;
      for (auto p = lock.find('/', 1); p != std::string::npos; p = lock.find('/', p + 1)) paths.push_back(lock.substr(0, p));
      paths.push_back(lock);
      aggs_.push_back(Agg{paths.size(), 0, std::vector<detail::NodeStat>(paths.size())});
      rt.kind = Kind::parents_made;
      rt.agg = static_cast<int>(aggs_.size()) - 1;
      for (std::size_t i = 0; i < paths.size(); ++i) {
        Request q;
        q.kind = ReqKind::create;
        q.path = paths[i];
        q.container = true;
        rt.part = i;
        submit(id, std::move(q), rt);
      }
      return;
    }
    case Cmd::read_stats: {  // one exists per name, answered together
      aggs_.push_back(Agg{c.names.size(), 0, std::vector<detail::NodeStat>(c.names.size())});
      rt.kind = Kind::stats_read;
      rt.agg = static_cast<int>(aggs_.size()) - 1;
      for (std::size_t i = 0; i < c.names.size(); ++i) {
        Request q;
        q.kind = ReqKind::exists;
        q.path = lock + "/" + c.names[i];
        rt.part = i;
        submit(id, std::move(q), rt);
      }
      return;
    }
    case Cmd::list:
      r.kind = ReqKind::get_children;
      r.path = lock;
      rt.kind = Kind::listed;
      rec.notification_lost = false;  // a fresh listing: it shows the blocker gone
      break;
    case Cmd::list_watch:
      rec.notification_lost = false;
      r.kind = ReqKind::get_children;
      r.path = lock;
      r.watch = true;
      rt.kind = Kind::listed;
      rt.children_watch = true;
      rec.watch_tag = c.tag;
      break;
    case Cmd::watch_blocker:
    case Cmd::watch_own:
      r.kind = ReqKind::get_data;  // as the shell: no watch is left on a node already gone
      r.path = lock + "/" + c.name;
      r.watch = true;
      rt.path = r.path;
      rt.kind = c.kind == Cmd::watch_own ? Kind::own_checked : Kind::blocker_checked;
      break;
    case Cmd::read_marker: r.kind = ReqKind::get_data; r.path = lock; rt.kind = Kind::marker_read; break;
    case Cmd::probe_blocker:  // one tree here: whether the node exists is the leader's answer
      r.kind = ReqKind::exists;
      r.path = lock + "/" + c.name;
      rt.kind = Kind::blocker_probed;
      ++counters_.probes;
      break;
    case Cmd::read_record:
      r.kind = ReqKind::get_data;
      r.path = "/zklock/revocations/" + c.name;
      rt.kind = Kind::record_read;
      break;
    case Cmd::remove:
    case Cmd::remove_extra:
      if (c.with_marker && rec.granted == 0) violate("marker: m" + std::to_string(id) + " writes the hand-off marker without a grant");
      r.kind = c.with_marker ? ReqKind::multi_release : ReqKind::remove;
      r.path = lock + "/" + c.name;
      r.path2 = lock;
      r.data = c.name;
      rt.kind = Kind::removed;
      if (c.kind == Cmd::remove) removes_[next_cookie_ + 1] = id;
      break;
  }
  submit(id, std::move(r), rt);
}

// A request goes out on the machine's session: sent when connected; held
// (sent on reconnect) or answered connection_loss when not; answered
// session_expired when that session is known to be over — replaced, or
// about to be (Slot::replacing): the pin of Client::Impl::issue.
void World::submit(int id, Request req, Route route) {
  const auto& rec = machines_[static_cast<std::size_t>(id)];
  auto& slot = slots_[static_cast<std::size_t>(actors_[static_cast<std::size_t>(rec.actor)].slot)];
  req.cookie = ++next_cookie_;
  req.session = rec.session;
  routes_[req.cookie] = route;
  if (rec.session != slot.sid || slot.state == Slot::replacing) {
    if (slot.state == Slot::replacing) ++counters_.pinned_refusals;
    local_.emplace_back(req.cookie, Zrc::session_expired);
  } else if (slot.state == Slot::connected) {
    zk_.send(std::move(req));
  } else if (rng_.chance(500)) {
    slot.held.push_back(std::move(req));
  } else {
    local_.emplace_back(req.cookie, Zrc::connection_loss);
  }
}

void World::drain_local() {
  while (!local_.empty()) {
    Reply r;
    r.cookie = local_.front().first;
    r.rc = local_.front().second;
    local_.pop_front();
    on_reply(r);
  }
}

void World::on_reply(const Reply& rep) {
  auto it = routes_.find(rep.cookie);
  if (it == routes_.end()) return;
  const Route rt = it->second;
  const bool watch = rt.kind == Kind::blocker_checked || rt.kind == Kind::own_checked || rt.children_watch;
  if (rep.notification) {
    routes_.erase(it);
    MachineEvent ev{Kind::children_changed};
    ev.tag = rt.tag;
    if (rt.children_watch) {
      if (rep.what != Reply::Watch::children) return;
      note_waiter_news(rt.machine);
      auto& rec = machines_[static_cast<std::size_t>(rt.machine)];
      const bool idle = rec.m->phase() == detail::LockMachine::Phase::retained;
      feed(rt.machine, ev);
      // (7) The bound's first half: the notification of the current watch
      // ends an idle retention at once (the release goes out now).
      if (idle && rt.tag == rec.watch_tag && rec.m->phase() == detail::LockMachine::Phase::retained) {
        violate("fairness (7): m" + std::to_string(rt.machine) + " still retains " + rec.held_path +
                " after its children watch fired");
      }
      return;
    } else if (rep.what == Reply::Watch::deleted) {
      ev.kind = rt.kind == Kind::own_checked ? Kind::own_deleted : Kind::blocker_deleted;
      // A fault: the notification of a blocker's deletion never arrives (a
      // lost packet, a server bug). The waiting watchdog must find it gone.
      if (ev.kind == Kind::blocker_deleted && !tail_ && rng_.chance(cfg_.drop_notifications)) {
        ++counters_.dropped_notifications;
        machines_[static_cast<std::size_t>(rt.machine)].notification_lost = true;
        if (cfg_.trace || cfg_.print_trace) note("DROP blocker_deleted tag=" + std::to_string(rt.tag) + " for m" + std::to_string(rt.machine));
        return;
      }
    } else if (rt.kind == Kind::own_checked) {
      ev.kind = Kind::own_changed;  // someone wrote our node's data: the machine watches again
    } else {
      // A blocker's data changed (its owner re-took it): watch it again,
      // like the real shell (lock_attempt.cpp, watch_deletion).
      Request q;
      q.kind = ReqKind::exists;
      q.path = rt.path;
      q.watch = true;
      submit(rt.machine, std::move(q), rt);
      return;
    }
    feed(rt.machine, ev);
    return;
  }
  if (!watch || rep.rc != Zrc::ok) routes_.erase(it);
  MachineEvent ev{rt.kind};
  ev.tag = rt.tag;
  ev.rc = to_rc(rep.rc);
  if (ev.rc == Rc::error) {
    ev.errc = Errc::system_error;
    ev.detail = zrc_name(rep.rc);
  }
  if (rt.agg >= 0) {
    auto& a = aggs_[static_cast<std::size_t>(rt.agg)];
    a.stats[rt.part] = detail::NodeStat{ev.rc, rep.czxid};
    if (++a.got < a.want) return;
    if (rt.kind == Kind::stats_read) {
      ev.rc = Rc::ok;
      ev.stats = a.stats;
    } else {  // parents_made: the worst part decides; node_exists is fine
      ev.rc = Rc::ok;
      for (auto& st : a.stats) {
        if (st.rc != Rc::ok && st.rc != Rc::node_exists && (ev.rc == Rc::ok || st.rc == Rc::connection_loss)) ev.rc = st.rc;
      }
    }
  }
  switch (rt.kind) {
    case Kind::created: ev.name = rep.name; ev.czxid = rep.czxid; break;
    case Kind::listed: {
      ev.children = rep.children;
      if (ev.rc == Rc::ok) note_listing(rt.machine, rep.children);
      std::vector<std::int32_t> seqs;
      for (const auto& c : rep.children) {
        if (auto p = protocol::parse_lock_node_name(c)) seqs.push_back(p->sequence);
      }
      if (seqs.size() >= 2 && !model::suffix_order_suffices(seqs)) {
        ++counters_.czxid_listings;
        std::sort(seqs.begin(), seqs.end());
        if (std::adjacent_find(seqs.begin(), seqs.end()) != seqs.end()) ++counters_.tied_listings;
      }
      break;
    }
    case Kind::marker_read:
    case Kind::record_read: ev.data = rep.data; break;
    default: break;
  }
  feed(rt.machine, ev);
}

// Invariant (7)'s record: a children notification delivered to a machine
// while a node not of its attempt is under its lock tells it of a waiter.
void World::note_waiter_news(int id) {
  auto& rec = machines_[static_cast<std::size_t>(id)];
  const Node* dir = zk_.find(locks_[static_cast<std::size_t>(rec.lock)]);
  if (!dir) return;
  for (const auto& c : dir->children) {
    auto p = protocol::parse_lock_node_name(c);
    if (p && p->guid.substr(0, 24) != rec.guid.substr(0, 24)) {
      rec.waiter_told = true;
      ++counters_.waiter_notices;
      return;
    }
  }
}

// A listing answered after that news and showing nobody else: the waiter left.
void World::note_listing(int id, const std::vector<std::string>& children) {
  auto& rec = machines_[static_cast<std::size_t>(id)];
  for (const auto& c : children) {
    auto p = protocol::parse_lock_node_name(c);
    if (p && p->guid.substr(0, 24) != rec.guid.substr(0, 24)) return;
  }
  rec.waiter_told = false;
}

// Which node went, and was it its machine's own remove? A granted node
// deleted by anyone else must be reported lost (invariant 3).
void World::track_deletions() {
  for (const auto& d : zk_.take_deleted()) {
    const auto name = d.path.substr(d.path.rfind('/') + 1);
    auto parsed = protocol::parse_lock_node_name(name);
    if (!parsed) continue;
    auto g = by_guid_.find(parsed->guid.substr(0, 24));
    if (g == by_guid_.end()) continue;
    auto& rec = machines_[static_cast<std::size_t>(g->second)];
    auto own = removes_.find(d.cookie);
    const bool self = !d.expiry && own != removes_.end() && own->second == g->second;
    if (cfg_.trace || cfg_.print_trace) {
      note("deleted " + short_name(name) + " of m" + std::to_string(g->second) +
           (d.expiry ? " (expiry)" : self ? " (own remove)" : d.cause == ReqKind::multi_revoke ? " (revoked)" : " (other)"));
    }
    if (!self && rec.granted && !rec.release_requested && d.path == rec.held_path) rec.must_lose = true;
  }
}

}  // namespace zklock::sim
