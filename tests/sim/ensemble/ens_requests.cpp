// The ensemble simulator's request path: a client's request at its server,
// the leader's checks, the answer after the commit, and the db (ens_world.hpp).
#include <string>

#include "ens_world.hpp"
#include "zklock/protocol/revocation.hpp"

namespace zklock::ensim {

namespace {
TxnKind txn_for(int kind) {
  switch (kind) {
    case k_create: return TxnKind::create_node;
    case k_delete: return TxnKind::delete_node;
    case k_release: return TxnKind::release_node;
    case k_probe: return TxnKind::probe_node;
    default: return TxnKind::heartbeat;  // setData on a node that does not exist: an error txn
  }
}
}  // namespace

// A write's (or a sync's) outcome reached its origin: answered in the
// session's order (FIFO), with the reads that waited behind it.
void World::answer_at(int s, std::uint64_t req, Answer a) {
  Server& sv = servers_[static_cast<std::size_t>(s)];
  if (a.zxid == 0) a.zxid = sv.last_zxid();
  for (auto& [c, q] : sv.fifo) {
    for (auto& p : q) {
      if (p.req != req || p.done) continue;
      p.done = true;
      p.ans = std::move(a);
      drain_fifo(s, c);
      return;
    }
  }
}

void World::drain_fifo(int s, int client) {
  Server& sv = servers_[static_cast<std::size_t>(s)];
  auto& q = sv.fifo[client];
  while (!q.empty() && (q.front().done || is_read(q.front().op.kind))) {
    auto p = std::move(q.front());
    q.pop_front();
    reply_client(s, client, p.req, p.done ? std::move(p.ans) : read(s, client, p.req, p.op));
  }
}

void World::reply_client(int s, int c, std::uint64_t req, Answer a) {
  send(s, c, [this, c, req, a = std::move(a)] { on_answer(c, req, a); });
}

void World::close_client(int s, int c, bool expired) {
  Server& sv = servers_[static_cast<std::size_t>(s)];
  sv.clients.erase(c);
  sv.fifo.erase(c);
  for (auto* table : {&sv.data_watches, &sv.child_watches}) {
    for (auto& [path, ws] : *table) std::erase_if(ws, [c](const auto& w) { return w.first == c; });
  }
  send_close(s, c, [this, c, expired] { on_client_closed(c, expired); });
  reset_view(s, c);
}

// A connect request: a new session is created by the leader (and committed);
// an existing one is revalidated by the leader (Learner.validateSession).
void World::server_connect(int s, int client, std::uint64_t session, std::uint64_t req, std::uint64_t last_zxid) {
  Server& sv = servers_[static_cast<std::size_t>(s)];
  if (sv.role == Role::looking) {
    close_client(s, client, false);  // not serving: the connection is refused
    return;
  }
  if (last_zxid > sv.last_zxid()) {
    // processConnectRequest: "Refusing session request for client as it has
    // seen zxid ... our last zxid is ...": the client tries another server.
    ++res_.c.refused_behind;
    close_client(s, client, false);
    return;
  }
  sv.waiting[req] = client;
  const int l = sv.leader == -1 ? s : sv.leader;
  if (sv.role == Role::leading) lead_request(s, s, client, session, req, Op{k_connect});
  else send(s, l, [this, l, s, client, session, req] { lead_request(l, s, client, session, req, Op{k_connect}); });
}

void World::finish_connect(int s, std::uint64_t req, std::uint64_t session, bool valid) {
  Server& sv = servers_[static_cast<std::size_t>(s)];
  const auto it = sv.waiting.find(req);
  if (it == sv.waiting.end() || sv.role == Role::looking) return;
  const int c = it->second;
  sv.waiting.erase(it);
  if (!valid) {
    send(s, c, [this, c, req, session] { on_connected(c, req, session, true); });
    return;
  }
  sv.clients[c] = session;
  sv.fifo.erase(c);
  if (sv.role == Role::following) sv.touches.insert(session);
  send(s, c, [this, c, req, session] { on_connected(c, req, session, false); });
}

// A request of a connected client at its server: touched (the learner's
// table, or the leader's tracker), then a ping or read is answered here, a
// sync or a write goes to the leader.
void World::server_request(int s, int client, std::uint64_t session, std::uint64_t req, Op op) {
  Server& sv = servers_[static_cast<std::size_t>(s)];
  if (sv.role == Role::looking || !sv.clients.count(client)) return;
  if (sv.role == Role::leading) leader_touch(s, session);
  else sv.touches.insert(session);
  if (op.kind == k_ping) {
    reply_client(s, client, req, Answer{rc_ok, sv.last_zxid()});
    return;
  }
  const int kind = op.kind;
  auto& q = sv.fifo[client];
  q.push_back(Server::Pend{req, op});
  if (is_read(kind)) {
    if (q.size() == 1) drain_fifo(s, client);
    return;
  }
  if (kind == k_sync && sv.role == Role::leading) {
    answer_at(s, req, Answer{});  // matchSyncs = false: a local client's sync is a read
    return;
  }
  if (sv.role == Role::leading) {
    lead_request(s, s, client, session, req, std::move(op));
  } else {
    const int l = sv.leader;
    send(s, l, [this, l, s, client, session, req, op = std::move(op)] { lead_request(l, s, client, session, req, op); });
  }
}

void World::lead_request(int l, int origin, int client, std::uint64_t session, std::uint64_t req, Op op) {
  Server& L = servers_[static_cast<std::size_t>(l)];
  if (L.role != Role::leading) return;
  const int kind = op.kind;
  auto answer = [this, l, origin, req](int rc) {
    if (origin == l) answer_at(l, req, Answer{rc});
    else send(l, origin, [this, origin, req, rc] { answer_at(origin, req, Answer{rc}); });
  };
  const auto tr = L.tracker.find(session);
  const bool live = tr != L.tracker.end() && !tr->second.closing;
  if (kind == k_connect) {
    if (session == 0) {
      const auto id = next_session_++;
      session_client_[id] = client;
      L.tracker[id] = {round_up(local(l) + cfg_.timeout), false, origin};
      propose(l, Txn{0, TxnKind::create_session, id, origin, req});
      return;
    }
    if (live) {
      leader_touch(l, session);
      tr->second.owner = origin;  // revalidateSession: setOwner
    }
    if (origin == l) finish_connect(l, req, session, live);
    else send(l, origin, [this, origin, req, session, live] { finish_connect(origin, req, session, live); });
    return;
  }
  if (kind == k_sync) {
    // Leader.processSync: at once when no proposal is outstanding, else
    // once the last outstanding one commits. No quorum is asked.
    if (L.applied == L.log.size()) answer(rc_ok);
    else L.syncs.push_back({L.log.back().zxid, {origin, req}});
    return;
  }
  if (!live) {
    answer(rc_expired);  // checkSession: SessionExpiredException (no evidence either way)
    return;
  }
  if (tr->second.owner != -1 && tr->second.owner != origin) {
    // checkSession(id, owner): a request the old server forwards after the
    // session moved fails (SessionMovedException), so it cannot run after
    // what the client sent on its new connection.
    answer(rc_moved);
    return;
  }
  if (tr->second.polled) {
    ++res_.c.window_writes;
    trace("s" + std::to_string(l) + " prepares a write of polled session " + std::to_string(session) +
          " (not yet closing)");
  }
  propose(l, Txn{0, txn_for(kind), session, origin, req, std::move(op)});
}

// The detector revokes a holder: its record and the node's delete, one
// multi at the leader (no client waits for it).
void World::revoke_one() {
  for (auto& L : servers_) {
    if (L.role != Role::leading || paused_until_[static_cast<std::size_t>(L.id)] > now_) continue;
    std::vector<std::string> heads;
    for (const auto& lock : locks_) {
      const auto& kids = L.tree[lock].children;
      if (!kids.empty()) heads.push_back(lock + "/" + *kids.begin());  // any node will do; the first suffix
    }
    if (heads.empty()) return;
    Txn t{0, TxnKind::revoke_node, 0, -1, 0};
    t.op.path = heads[shell_rng_.below(heads.size())];
    protocol::RevocationRecord rec;
    rec.victim_node = t.op.path;
    rec.policy = "operator";
    rec.detector = "ensemble-sim";
    rec.reason = "simulated revocation";
    t.op.data = protocol::encode_revocation_record(rec);
    trace("detector revokes " + t.op.path);
    propose(L.id, std::move(t));
    return;
  }
}

// kill -9: every connection resets; the log survives (forceSync); the
// member restarts after `for_us` and rejoins.
void World::kill(int s, Micros for_us) {
  go_looking(s, "killed");
  paused_until_[static_cast<std::size_t>(s)] = now_ + for_us;
}

}  // namespace zklock::ensim
