// The ensemble simulator's shell, its I/O half (ens_shell.hpp): a machine's
// requests as the library's shell sends them (lib/src/lock_attempt_io.cpp),
// answers and watch notifications turned into the machine's events.
#include <string>

#include "ens_world.hpp"

namespace zklock::ensim {

using detail::MachineEvent;
using detail::MachineRequest;
using MRc = detail::Rc;
using EvKind = MachineEvent::Kind;
using Cmd = MachineRequest::Kind;

namespace {
ClientState& client_of(std::vector<ClientState>& v, int proc) { return v[static_cast<std::size_t>(proc - kServers)]; }

MRc to_rc(int rc) {
  switch (rc) {
    case rc_ok: return MRc::ok;
    case rc_no_node: return MRc::no_node;
    case rc_expired: return MRc::session_expired;
    case rc_bad_version: return MRc::ok;  // only a probe gets it: the node exists, nothing proven
    default: return MRc::connection_loss;  // rc_loss, rc_moved
  }
}
}  // namespace

void World::execute(int id, const MachineRequest& r) {
  const EnsMachine& m = machines_[static_cast<std::size_t>(id)];
  const std::string& lock = locks_[static_cast<std::size_t>(m.lock)];
  Route rt{id, r.tag, EvKind::created};
  Op op;
  switch (r.kind) {
    case Cmd::create:
      op = Op{k_create, lock + "/" + protocol::lock_node_prefix(m.m->config().mode,
                                                               protocol::owner_key(m.m->config().holder.owner), r.name),
              m.m->config().holder.owner};
      break;
    case Cmd::make_parents: {
      // The locks exist from the start (ens_db.cpp): every create of them
      // would find node_exists, which counts as made.
      rt.kind = EvKind::parents_made;
      const int c = m.client;
      at_local(c, 0, [this, c, rt] { on_machine_answer(client_of(clients_, c), rt, Answer{rc_ok}); });
      return;
    }
    case Cmd::list:
    case Cmd::list_watch:
      rt.kind = EvKind::listed;
      op = Op{k_children, lock, {}, r.kind == Cmd::list_watch};
      rt.children = true;
      break;
    case Cmd::read_stats: {
      aggs_.push_back(Agg{r.names.size(), 0, std::vector<detail::NodeStat>(r.names.size())});
      rt.kind = EvKind::stats_read;
      rt.agg = static_cast<int>(aggs_.size()) - 1;
      for (std::size_t i = 0; i < r.names.size(); ++i) {
        rt.part = i;
        submit(id, Op{k_exists, lock + "/" + r.names[i]}, rt);
      }
      return;
    }
    case Cmd::watch_blocker:
    case Cmd::watch_own:
      rt.kind = r.kind == Cmd::watch_own ? EvKind::own_checked : EvKind::blocker_checked;
      op = Op{k_get_data, lock + "/" + r.name, {}, true};  // a getData: no watch is left on a node already gone
      if (r.kind == Cmd::watch_blocker) {
        auto& mm = machines_[static_cast<std::size_t>(id)];
        mm.blocker_tag = r.tag;
        mm.blocker_since = local(m.client);
      }
      break;
    case Cmd::read_marker: rt.kind = EvKind::marker_read; op = Op{k_get_data, lock}; break;
    case Cmd::read_record: rt.kind = EvKind::record_read; op = Op{k_get_data, "/zklock/revocations/" + r.name}; break;
    case Cmd::probe_blocker: rt.kind = EvKind::blocker_probed; op = Op{k_probe, lock + "/" + r.name}; break;
    case Cmd::remove:
    case Cmd::remove_extra:
      rt.kind = EvKind::removed;
      op = r.with_marker ? Op{k_release, lock + "/" + r.name, r.name} : Op{k_delete, lock + "/" + r.name};
      break;
  }
  submit(id, std::move(op), rt);
}

// A request goes out on the machine's session: sent when connected;
// answered connection loss when not, session expired when that session is
// over (the pin of Client::Impl::issue). Local answers come in a later step.
void World::submit(int id, Op op, Route rt) {
  const EnsMachine& m = machines_[static_cast<std::size_t>(id)];
  ClientState& cl = client_of(clients_, m.client);
  rt.path = op.path;
  rt.watch = op.watch;
  if (cl.session != m.session || !cl.connected) {
    const int rc = cl.session != m.session ? rc_expired : rc_loss;
    const int c = cl.id;
    at_local(c, 0, [this, c, rt, rc] { on_machine_answer(client_of(clients_, c), rt, Answer{rc}); });
    return;
  }
  const auto req = client_send(cl.id, std::move(op));
  auto& p = cl.inflight[req];
  p.machine = true;
  p.route = std::move(rt);
}

void World::on_machine_answer(ClientState& cl, const Route& rt, const Answer& a, std::uint64_t req) {
  if (rt.watch && a.rc == rc_ok && req != 0) {
    cl.watches[req] = WatchRec{req, rt.path, rt.children};
    cl.watch_routes[req] = rt;
  }
  EnsMachine& m = machines_[static_cast<std::size_t>(rt.machine)];
  if (m.finished) return;
  MachineEvent ev{rt.kind};
  ev.tag = rt.tag;
  ev.rc = to_rc(a.rc);
  if (rt.agg >= 0) {
    Agg& g = aggs_[static_cast<std::size_t>(rt.agg)];
    g.stats[rt.part] = detail::NodeStat{ev.rc, a.czxid};
    if (++g.got < g.want) return;
    ev.rc = MRc::ok;
    ev.stats = std::move(g.stats);
  }
  switch (rt.kind) {
    case EvKind::created: ev.name = a.name; ev.czxid = a.czxid; break;
    case EvKind::listed: ev.children = a.children; break;
    case EvKind::marker_read:
    case EvKind::record_read: ev.data = a.data; break;
    default: break;
  }
  feed(rt.machine, std::move(ev));
}

// A watch fired (or setWatches found its node changed since the last zxid).
void World::on_notify(int c, std::uint64_t watch, bool children, bool deleted) {
  ClientState& cl = client_of(clients_, c);
  const auto it = cl.watches.find(watch);
  if (it == cl.watches.end()) return;  // fired already, or its session is over
  cl.watches.erase(it);
  const Route rt = cl.watch_routes[watch];
  cl.watch_routes.erase(watch);
  if (machines_[static_cast<std::size_t>(rt.machine)].finished) return;
  MachineEvent ev{EvKind::children_changed};
  ev.tag = rt.tag;
  if (!children) {
    if (deleted) {
      ev.kind = rt.kind == EvKind::own_checked ? EvKind::own_deleted : EvKind::blocker_deleted;
    } else if (rt.kind == EvKind::own_checked) {
      ev.kind = EvKind::own_changed;
    } else {
      // A blocker's data changed (its owner re-took it): watch it again,
      // as the library's shell does (lock_attempt_io.cpp, watch_deletion).
      submit(rt.machine, Op{k_get_data, rt.path, {}, true}, rt);
      return;
    }
  }
  feed(rt.machine, std::move(ev));
}

}  // namespace zklock::ensim
