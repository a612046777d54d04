// The ensemble simulator's request path: a client's request at its server,
// the leader's checks, the answer after the commit, and the db (ens_world.hpp).
#include <string>

#include "ens_world.hpp"

namespace zklock::ensim {

namespace {
TxnKind txn_for(int kind) {
  switch (kind) {
    case k_create: return TxnKind::create_node;
    case k_delete: return TxnKind::delete_node;
    default: return TxnKind::heartbeat;  // setData on a node that does not exist: an error txn
  }
}
}  // namespace

void World::apply(int s, std::size_t upto, bool effects) {
  Server& sv = servers_[static_cast<std::size_t>(s)];
  for (; sv.applied < upto && sv.applied < sv.log.size(); ++sv.applied) {
    const Txn& t = sv.log[sv.applied];
    std::uint64_t value = t.zxid;  // the answer's value: a create's czxid
    auto drop_nodes = [&sv](std::uint64_t session) {
      for (auto it = sv.queue.begin(); it != sv.queue.end();) it = it->second == session ? sv.queue.erase(it) : std::next(it);
    };
    switch (t.kind) {
      case TxnKind::create_session: sv.sessions.insert(t.session); break;
      case TxnKind::close_session:
        sv.sessions.erase(t.session);
        drop_nodes(t.session);
        sv.tracker.erase(t.session);
        if (effects) {
          for (const auto& [c, session] : std::map<int, std::uint64_t>(sv.clients)) {
            if (session == t.session) close_client(s, c, true);
          }
        }
        break;
      case TxnKind::create_node: {
        // One node per session: a create sent again after a lost answer
        // finds the first (the library finds it by its GUID).
        bool have = false;
        for (const auto& [z, sess] : sv.queue) {
          if (sess == t.session) have = true, value = z;
        }
        if (!have && sv.sessions.count(t.session)) sv.queue[t.zxid] = t.session;
        break;
      }
      case TxnKind::delete_node: drop_nodes(t.session); break;
      case TxnKind::heartbeat: break;
    }
    if (!effects || t.origin != s) continue;
    if (t.kind == TxnKind::create_session) {
      finish_connect(s, t.req, t.session, true);
    } else {
      answer_at(s, t.req, t.kind == TxnKind::create_node ? k_create : t.kind == TxnKind::delete_node ? k_delete : k_heartbeat,
                rc_ok, value);
    }
  }
  if (effects) tell_heads(s);
}

// The head's client, if connected here, is told (its watch fires).
void World::tell_heads(int s) {
  Server& sv = servers_[static_cast<std::size_t>(s)];
  if (sv.queue.empty()) return;
  const auto [czxid, session] = *sv.queue.begin();
  for (const auto& [c, sess] : sv.clients) {
    if (sess != session || sv.told[c] == czxid) continue;
    sv.told[c] = czxid;
    const int cc = c;
    const auto z = czxid;
    send(s, cc, [this, cc, z] { on_head(cc, z); });
  }
}

void World::answer_at(int s, std::uint64_t req, int kind, int rc, std::uint64_t value) {
  Server& sv = servers_[static_cast<std::size_t>(s)];
  const auto it = sv.waiting.find(req);
  if (it == sv.waiting.end()) return;
  const int c = it->second;
  sv.waiting.erase(it);
  reply_client(s, c, kind, req, rc, value);
}

void World::reply_client(int s, int c, int /*kind*/, std::uint64_t req, int rc, std::uint64_t value) {
  send(s, c, [this, c, req, rc, value] { on_answer(c, req, rc, value); });
}

void World::close_client(int s, int c, bool expired) {
  servers_[static_cast<std::size_t>(s)].clients.erase(c);
  send_close(s, c, [this, c, expired] { on_client_closed(c, expired); });
  reset_view(s, c);
}

// A connect request: a new session is created by the leader (and committed);
// an existing one is revalidated by the leader (Learner.validateSession).
void World::server_connect(int s, int client, std::uint64_t session, std::uint64_t req) {
  Server& sv = servers_[static_cast<std::size_t>(s)];
  if (sv.role == Role::looking) {
    close_client(s, client, false);  // not serving: the connection is refused
    return;
  }
  sv.waiting[req] = client;
  const int l = sv.leader == -1 ? s : sv.leader;
  if (sv.role == Role::leading) lead_request(s, s, client, session, k_connect, req);
  else send(s, l, [this, l, s, client, session, req] { lead_request(l, s, client, session, k_connect, req); });
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
  sv.told.erase(c);
  if (sv.role == Role::following) sv.touches.insert(session);
  send(s, c, [this, c, req, session] { on_connected(c, req, session, false); });
  tell_heads(s);
}

// A request of a connected client at its server: touched (the learner's
// table, or the leader's tracker), then a ping or read is answered here, a
// sync or a write goes to the leader.
void World::server_request(int s, int client, std::uint64_t session, int kind, std::uint64_t req) {
  Server& sv = servers_[static_cast<std::size_t>(s)];
  if (sv.role == Role::looking || !sv.clients.count(client)) return;
  if (sv.role == Role::leading) leader_touch(s, session);
  else sv.touches.insert(session);
  if (kind == k_ping) {
    reply_client(s, client, kind, req, rc_ok, 0);
    return;
  }
  sv.waiting[req] = client;
  if (kind == k_sync && sv.role == Role::leading) {
    answer_at(s, req, kind, rc_ok, 0);  // matchSyncs = false: a local client's sync is a read
    return;
  }
  if (sv.role == Role::leading) {
    lead_request(s, s, client, session, kind, req);
  } else {
    const int l = sv.leader;
    send(s, l, [this, l, s, client, session, kind, req] { lead_request(l, s, client, session, kind, req); });
  }
}

void World::lead_request(int l, int origin, int client, std::uint64_t session, int kind, std::uint64_t req) {
  Server& L = servers_[static_cast<std::size_t>(l)];
  if (L.role != Role::leading) return;
  auto answer = [this, l, origin, req, kind](int rc) {
    if (origin == l) answer_at(l, req, kind, rc, 0);
    else send(l, origin, [this, origin, req, kind, rc] { answer_at(origin, req, kind, rc, 0); });
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
  propose(l, Txn{0, txn_for(kind), session, origin, req});
}

// kill -9: every connection resets; the log survives (forceSync); the
// member restarts after `for_us` and rejoins.
void World::kill(int s, Micros for_us) {
  go_looking(s, "killed");
  paused_until_[static_cast<std::size_t>(s)] = now_ + for_us;
}

}  // namespace zklock::ensim
