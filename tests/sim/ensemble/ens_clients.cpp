// The ensemble simulator's clients: a connection and a session as the C
// client keeps them (requests answered connection loss when it drops,
// watches set again on the next connection, the last zxid seen), the
// validity bound as the library keeps it (the real rule,
// lib/src/validity_rule.hpp, with its validity_expired and validity_proven
// events), and heartbeats (ens_world.hpp). The lock machines' shell is
// ens_shell.cpp.
#include <algorithm>
#include <string>

#include "ens_world.hpp"

namespace zklock::ensim {

using EvKind = detail::MachineEvent::Kind;

namespace {
detail::RuleClock::time_point tp(Micros local) {
  return detail::RuleClock::time_point(std::chrono::microseconds(local));
}
Micros us(detail::RuleClock::duration d) { return std::chrono::duration_cast<std::chrono::microseconds>(d).count(); }
Micros us(detail::RuleClock::time_point t) { return us(t.time_since_epoch()); }
ClientState& client_of(std::vector<ClientState>& v, int proc) { return v[static_cast<std::size_t>(proc - kServers)]; }
Micros margin_of(Micros timeout) { return std::max<Micros>(timeout / 10, 20 * kMs); }
}  // namespace

void World::start_clients() {
  for (auto& cl : clients_) {
    cl.server = static_cast<int>(rng_.below(kServers));
    if (rng_.chance(400)) cl.pinned = cl.server;
    cl.retains = shell_rng_.chance(500);
    const int c = cl.id;
    at_local(c, 300 * kMs + static_cast<Micros>(rng_.below(500 * kMs)), [this, c] { client_connect(c); });
  }
}

// The session is over: its machines hear `expired`; the C client's watches
// go with it.
void World::new_session(ClientState& cl) {
  const auto old = cl.session;
  if (cl.session != 0) res_.c.session_time += now_ - cl.session_since;
  cl.session = 0;
  cl.session_asked.reset();
  cl.have_bound = false;
  cl.watches.clear();
  cl.watch_routes.clear();
  if (old != 0) session_event(cl, EvKind::expired, old);
}

// The connection dropped: every request still unanswered is answered
// connection loss (in request order), then the machines hear `disconnected`.
void World::connection_lost(ClientState& cl) {
  if (!cl.connected) return;
  cl.connected = false;
  const auto lost = std::exchange(cl.inflight, {});
  cl.hb_inflight = false;
  for (const auto& [req, p] : lost) {
    if (p.machine) on_machine_answer(cl, p.route, Answer{rc_loss});
  }
  if (cl.session != 0) session_event(cl, EvKind::disconnected, cl.session);
}

// The C client tries the next server of its list; a connect that does not
// complete within timeout / (number of servers) is abandoned.
void World::client_connect(int c) {
  ClientState& cl = client_of(clients_, c);
  connection_lost(cl);
  ++cl.attempt;
  cl.inflight.clear();
  cl.hb_inflight = false;
  cl.server = cl.pinned >= 0 ? cl.pinned : (cl.server + 1 + static_cast<int>(rng_.below(2))) % kServers;
  const int s = cl.server;
  connect_link(c, s);
  const Micros t = local(c);
  if (cl.session == 0 && !cl.session_asked) cl.session_asked = t;
  cl.last_sent = cl.last_heard = t;
  const auto req = next_req_++;
  cl.connect_req = req;
  const auto session = cl.session;
  const auto seen = cl.last_zxid;
  send(c, s, [this, s, c, session, req, seen] { server_connect(s, c, session, req, seen); });
  const auto attempt = cl.attempt;
  at_local(c, cfg_.timeout / kServers, [this, c, s, attempt] {
    ClientState& cl2 = client_of(clients_, c);
    if (cl2.attempt != attempt || cl2.connected) return;
    reset_view(c, s);
    client_connect(c);
  });
}

void World::on_connected(int c, std::uint64_t req, std::uint64_t session, bool expired) {
  ClientState& cl = client_of(clients_, c);
  // Only the current attempt's answer: over TCP an earlier attempt's goes to
  // the connection it was asked on, which is closed (the model's server keeps
  // one connection per client, so without this check it would arrive here).
  if (cl.connected || req != cl.connect_req) return;
  if (expired) {
    trace("c" + std::to_string(c) + " told: session " + std::to_string(cl.session) + " expired");
    new_session(cl);
    reset_view(c, cl.server);
    client_connect(c);
    return;
  }
  cl.connected = true;
  ++cl.conn;
  cl.last_heard = local(c);
  const bool fresh = cl.session == 0;
  if (fresh) {
    cl.session = session;
    cl.session_since = now_;
    const Micros m = margin_of(cfg_.timeout);
    cl.rule.reset(detail::ValidityParams{std::chrono::microseconds(cfg_.timeout), std::chrono::microseconds(cfg_.tick),
                                         std::chrono::microseconds(m)});
    cl.pairing.clear();
    cl.bound = *cl.session_asked + cfg_.timeout - m;  // the leader created it after we first asked
    cl.have_bound = true;
    cl.lapse_told = false;
    arm_lapse(cl);
  }
  trace("c" + std::to_string(c) + " connected to s" + std::to_string(cl.server) + ", session " + std::to_string(cl.session));
  // setWatches goes first on the new connection, then what the machines resend.
  std::vector<WatchRec> ws;
  for (const auto& [id, w] : cl.watches) ws.push_back(w);
  const int s = cl.server;
  const auto seen = cl.last_zxid;
  if (!ws.empty()) send(c, s, [this, s, c, seen, ws = std::move(ws)] { set_watches(s, c, seen, ws); });
  if (!fresh) {
    lapse_check(cl);  // a lapse is reported before the reconnected event
    session_event(cl, EvKind::reconnected, cl.session);
  }
  const auto attempt = cl.attempt;
  client_tick(c, attempt);
}

void World::on_client_closed(int c, bool expired) {
  ClientState& cl = client_of(clients_, c);
  trace("c" + std::to_string(c) + (expired ? " session expired" : " connection closed"));
  connection_lost(cl);
  if (expired) new_session(cl);
  reset_view(c, cl.server);
  ++cl.attempt;  // the old attempt's timers are void
  // Another server at once; the same one again only after a pause (the C
  // client does not spin on a server that refuses it).
  const auto attempt = cl.attempt;
  at_local(c, cl.pinned >= 0 ? 50 * kMs + static_cast<Micros>(rng_.below(100 * kMs)) : 0, [this, c, attempt] {
    if (client_of(clients_, c).attempt == attempt) client_connect(c);
  });
}

std::uint64_t World::client_send(int c, Op op) {
  ClientState& cl = client_of(clients_, c);
  const auto req = next_req_++;
  cl.inflight[req] = {op.kind, local(c), cl.conn, Route{}, false};
  cl.last_sent = local(c);
  const int s = cl.server;
  const auto session = cl.session;
  send(c, s, [this, s, c, session, req, op = std::move(op)] { server_request(s, c, session, req, op); });
  return req;
}

void World::client_tick(int c, std::uint64_t attempt) {
  ClientState& cl = client_of(clients_, c);
  if (cl.attempt != attempt || !cl.connected || stop_) return;
  lapse_check(cl);
  const Micros t = local(c);
  if (t - cl.last_heard > cfg_.timeout * 2 / 3) {  // the C client's read timeout
    trace("c" + std::to_string(c) + " read timeout on s" + std::to_string(cl.server));
    reset_view(c, cl.server);
    client_connect(c);
    return;
  }
  if (t - cl.last_sent >= cfg_.timeout / 3) client_send(c, Op{k_ping});
  const auto params = cl.rule.params();
  if (!cl.hb_inflight) {
    if (cfg_.rule != Rule::sync_pairing) {
      // Due a period after the connection's latest committed write.
      const auto latest = cl.rule.latest_sent();
      if (!latest || t >= us(*latest) + us(params.heartbeat_period())) {
        cl.hb_inflight = true;
        ++res_.c.heartbeats;
        client_send(c, Op{k_heartbeat, "/zklock/heartbeat"});
      }
    } else if (cl.pairing.empty() || t >= cl.pairing.back() + cfg_.timeout / 3) {
      cl.hb_inflight = true;
      ++res_.c.syncs;
      client_send(c, Op{k_sync});
    }
  }
  shell_tick(cl);
  const Micros every = std::min<Micros>(us(params.heartbeat_period()) / 4, cfg_.timeout / 12);
  at_local(c, std::max<Micros>(every, kMs), [this, c, attempt] { client_tick(c, attempt); });
}

void World::on_answer(int c, std::uint64_t req, Answer a) {
  ClientState& cl = client_of(clients_, c);
  cl.last_heard = local(c);
  cl.last_zxid = std::max(cl.last_zxid, a.zxid);
  const auto it = cl.inflight.find(req);
  if (it == cl.inflight.end()) return;
  const auto p = it->second;
  cl.inflight.erase(it);
  if (p.conn != cl.conn) return;
  if (p.kind == k_heartbeat || p.kind == k_sync) cl.hb_inflight = false;
  if (a.rc == rc_moved) {
    // A late revalidation through a server we had given up on moved the
    // session there: connecting again moves it back.
    trace("c" + std::to_string(c) + " session moved: reconnecting");
    if (p.machine) on_machine_answer(cl, p.route, Answer{rc_loss});
    reset_view(c, cl.server);
    client_connect(c);
    return;
  }
  // A write a quorum committed (ok, or an error txn) is the rule's evidence.
  if ((a.rc == rc_ok || a.rc == rc_no_node || a.rc == rc_bad_version) && !is_read(p.kind) && p.kind != k_ping) {
    raise_bound(cl, p.kind, p.sent, local(c));
  }
  if (p.machine) on_machine_answer(cl, p.route, a, req);
}

// The bound rises only on evidence: the chain rule on committed writes
// (the library), or the old pairing of ordered answers a period apart.
void World::raise_bound(ClientState& cl, int kind, Micros sent, Micros answered) {
  std::optional<Micros> candidate;
  if (cfg_.rule != Rule::sync_pairing) {
    if (kind == k_sync) return;
    // The bound held so far anchors the chain (the library passes its
    // valid_until). Without the anchor, every chain is taken as held.
    std::optional<detail::RuleClock::time_point> held;
    if (cl.have_bound) held = tp(cl.bound);
    if (cfg_.rule == Rule::chain_unanchored) held = detail::RuleClock::time_point::max();
    if (const auto b = cl.rule.committed(cl.conn, tp(sent), tp(answered), held)) candidate = us(*b);
  } else {
    std::optional<Micros> base;
    for (const Micros t1 : cl.pairing) {
      if (t1 <= sent - cfg_.timeout / 3) base = t1;
    }
    cl.pairing.push_back(sent);
    while (cl.pairing.size() > 64) cl.pairing.pop_front();
    if (base) candidate = *base + cfg_.timeout - margin_of(cfg_.timeout);
  }
  if (!candidate || *candidate <= cl.bound) return;
  lapse_check(cl);  // a lapse is reported before the bound rises again
  const bool from_past = cl.bound <= answered;
  cl.bound = *candidate;
  cl.lapse_told = false;
  arm_lapse(cl);
  if (from_past) session_event(cl, EvKind::validity_proven, cl.session);
}

bool World::within_bound(const ClientState& cl) const {
  return cl.session != 0 && cl.have_bound && local(cl.id) < cl.bound;
}

// The library's lapse timer: validity_expired when the bound passes,
// connected or not (a later raise re-arms it).
void World::arm_lapse(ClientState& cl) {
  const int c = cl.id;
  const auto session = cl.session;
  const Micros bound = cl.bound;
  at_local(c, std::max<Micros>(bound - local(c), 0), [this, c, session, bound] {
    ClientState& cl2 = client_of(clients_, c);
    if (cl2.session == session && cl2.bound == bound) lapse_check(cl2);
  });
}

// validity_expired, once per lapse, to the session's machines.
void World::lapse_check(ClientState& cl) {
  if (cl.session == 0 || !cl.have_bound || cl.lapse_told || local(cl.id) < cl.bound) return;
  cl.lapse_told = true;
  for (const int id : cl.ms) {
    const EnsMachine& m = machines_[static_cast<std::size_t>(id)];
    if (!m.leased || m.session != cl.session) continue;
    ++res_.c.lapses;
    trace("c" + std::to_string(cl.id) + " lease on " + m.path + " lapsed (validity_expired)");
    if (cfg_.check_liveness && m.handed_at >= settled_from_ && settled_from_ > 0) {
      fail("L1: c" + std::to_string(cl.id) + "'s lease on " + m.path + ", handed out on a settled ensemble, lapsed");
    }
  }
  session_event(cl, EvKind::validity_expired, cl.session);
}

// V2: a close of a session commits only once its client's bound has passed.
void World::check_close(std::uint64_t session) {
  const auto it = session_client_.find(session);
  if (!cfg_.check_close || it == session_client_.end()) return;
  const ClientState& cl = client_of(clients_, it->second);
  if (cl.session == session && cl.have_bound && local(cl.id) < cl.bound) {
    fail("V2: session " + std::to_string(session) + " closed while c" + std::to_string(cl.id) + "'s bound is " +
         std::to_string((cl.bound - local(cl.id)) / kMs) + " ms ahead");
  }
}

}  // namespace zklock::ensim
