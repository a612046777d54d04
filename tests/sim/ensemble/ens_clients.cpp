// The ensemble simulator's clients: a connection and a session as the C
// client keeps them, the validity bound as the library keeps it (the real
// rule, lib/src/validity_rule.hpp), heartbeats, and one lock (ens_world.hpp).
#include <algorithm>
#include <string>

#include "ens_world.hpp"

namespace zklock::ensim {

namespace {
detail::RuleClock::time_point tp(Micros local) {
  return detail::RuleClock::time_point(std::chrono::microseconds(local));
}
Micros us(detail::RuleClock::duration d) { return std::chrono::duration_cast<std::chrono::microseconds>(d).count(); }
Micros us(detail::RuleClock::time_point t) { return us(t.time_since_epoch()); }
}  // namespace

void World::start_clients() {
  for (auto& cl : clients_) {
    cl.server = static_cast<int>(rng_.below(kServers));
    if (rng_.chance(400)) cl.pinned = cl.server;
    const int c = cl.id;
    at_local(c, 300 * kMs + static_cast<Micros>(rng_.below(500 * kMs)), [this, c] { client_connect(c); });
  }
}

static ClientState& client_of(std::vector<ClientState>& v, int proc) { return v[static_cast<std::size_t>(proc - kServers)]; }

Micros margin_of(Micros timeout) { return std::max<Micros>(timeout / 10, 20 * kMs); }

void World::new_session(ClientState& cl) {
  if (cl.session != 0) res_.c.session_time += now_ - cl.session_since;
  cl.session = 0;
  cl.session_asked.reset();
  cl.have_bound = false;
  cl.lock = Lock::idle;
  cl.node = 0;
}

// The C client tries the next server of its list; a connect that does not
// complete within timeout / (number of servers) is abandoned.
void World::client_connect(int c) {
  ClientState& cl = client_of(clients_, c);
  cl.connected = false;
  ++cl.attempt;
  cl.inflight.clear();
  cl.hb_inflight = false;
  cl.retry = false;  // what is lost with the connection is sent again once connected
  cl.server = cl.pinned >= 0 ? cl.pinned : (cl.server + 1 + static_cast<int>(rng_.below(2))) % kServers;
  const int s = cl.server;
  connect_link(c, s);
  const Micros t = local(c);
  if (cl.session == 0 && !cl.session_asked) cl.session_asked = t;
  cl.last_sent = cl.last_heard = t;
  const auto req = next_req_++;
  cl.connect_req = req;
  const auto session = cl.session;
  send(c, s, [this, s, c, session, req] { server_connect(s, c, session, req); });
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
  if (cl.session == 0) {
    cl.session = session;
    cl.session_since = now_;
    const Micros m = margin_of(cfg_.timeout);
    cl.rule.reset(detail::ValidityParams{std::chrono::microseconds(cfg_.timeout), std::chrono::microseconds(cfg_.tick),
                                         std::chrono::microseconds(m)});
    cl.pairing.clear();
    cl.bound = *cl.session_asked + cfg_.timeout - m;  // the leader created it after we first asked
    cl.have_bound = true;
    cl.lock = Lock::idle;
    cl.idle_until = local(c);
  }
  trace("c" + std::to_string(c) + " connected to s" + std::to_string(cl.server) + ", session " + std::to_string(cl.session));
  // Work lost with the old connection is sent again (a create finds the
  // node it may have made; a delete is idempotent).
  if (cl.lock == Lock::creating) client_send(c, k_create);
  if (cl.lock == Lock::releasing) client_send(c, k_delete);
  const auto attempt = cl.attempt;
  client_tick(c, attempt);
}

void World::on_client_closed(int c, bool expired) {
  ClientState& cl = client_of(clients_, c);
  trace("c" + std::to_string(c) + (expired ? " session expired" : " connection closed"));
  if (expired) new_session(cl);
  reset_view(c, cl.server);
  cl.connected = false;
  ++cl.attempt;  // the old attempt's timers are void
  // Another server at once; the same one again only after a pause (the C
  // client does not spin on a server that refuses it).
  const auto attempt = cl.attempt;
  at_local(c, cl.pinned >= 0 ? 50 * kMs + static_cast<Micros>(rng_.below(100 * kMs)) : 0, [this, c, attempt] {
    if (client_of(clients_, c).attempt == attempt) client_connect(c);
  });
}

void World::client_send(int c, int kind, std::uint64_t* id_out) {
  ClientState& cl = client_of(clients_, c);
  const auto req = next_req_++;
  if (id_out) *id_out = req;
  cl.inflight[req] = {kind, local(c), cl.conn};
  cl.last_sent = local(c);
  const int s = cl.server;
  const auto session = cl.session;
  send(c, s, [this, s, c, session, kind, req] { server_request(s, c, session, kind, req); });
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
  if (t - cl.last_sent >= cfg_.timeout / 3) client_send(c, k_ping);
  const auto params = cl.rule.params();
  if (!cl.hb_inflight) {
    if (cfg_.rule != Rule::sync_pairing) {
      // Due a period after the connection's latest committed write.
      const auto latest = cl.rule.latest_sent();
      if (!latest || t >= us(*latest) + us(params.heartbeat_period())) {
        cl.hb_inflight = true;
        ++res_.c.heartbeats;
        client_send(c, k_heartbeat);
      }
    } else if (cl.pairing.empty() || t >= cl.pairing.back() + cfg_.timeout / 3) {
      cl.hb_inflight = true;
      ++res_.c.syncs;
      client_send(c, k_sync);
    }
  }
  if (cl.retry) {
    cl.retry = false;
    if (cl.lock == Lock::creating) client_send(c, k_create);
    if (cl.lock == Lock::releasing) client_send(c, k_delete);
  }
  if (cl.lock == Lock::idle && t >= cl.idle_until) {
    cl.lock = Lock::creating;
    client_send(c, k_create);
  } else if (cl.lock == Lock::holding && t >= cl.hold_until) {
    trace("c" + std::to_string(c) + " releases token " + std::to_string(cl.node));
    cl.lock = Lock::releasing;
    client_send(c, k_delete);
  }
  maybe_hand_out(cl);
  const Micros every = std::min<Micros>(us(params.heartbeat_period()) / 4, cfg_.timeout / 12);
  at_local(c, std::max<Micros>(every, kMs), [this, c, attempt] { client_tick(c, attempt); });
}

void World::on_answer(int c, std::uint64_t req, int rc, std::uint64_t value) {
  ClientState& cl = client_of(clients_, c);
  cl.last_heard = local(c);
  const auto it = cl.inflight.find(req);
  if (it == cl.inflight.end()) return;
  const auto p = it->second;
  cl.inflight.erase(it);
  if (p.conn != cl.conn) return;
  if (p.kind == k_heartbeat || p.kind == k_sync) cl.hb_inflight = false;
  if (p.kind == k_ping) return;
  if (rc == rc_moved) {
    // A late revalidation through a server we had given up on moved the
    // session there: connecting again moves it back.
    trace("c" + std::to_string(c) + " session moved: reconnecting");
    reset_view(c, cl.server);
    client_connect(c);
    return;
  }
  if (rc != rc_ok) {
    cl.retry = p.kind == k_create || p.kind == k_delete;
    return;
  }
  raise_bound(cl, p.kind, p.sent, local(c));
  if (p.kind == k_create && cl.lock == Lock::creating) {
    cl.lock = Lock::queued;
    cl.node = value;
  } else if (p.kind == k_delete && cl.lock == Lock::releasing) {
    cl.lock = Lock::idle;
    cl.node = 0;
    cl.idle_until = local(c) + static_cast<Micros>(rng_.below(500 * kMs));
  }
  maybe_hand_out(cl);
}

void World::on_head(int c, std::uint64_t czxid) {
  ClientState& cl = client_of(clients_, c);
  cl.last_heard = local(c);
  if ((cl.lock == Lock::queued || cl.lock == Lock::creating) && (cl.node == 0 || cl.node == czxid)) {
    cl.lock = Lock::granted;
    cl.node = czxid;
    trace("c" + std::to_string(c) + " told its node " + std::to_string(czxid) + " is the head");
    maybe_hand_out(cl);
  }
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
  cl.bound = *candidate;
}

bool World::valid(const ClientState& cl) const {
  return cl.lock == Lock::holding && cl.have_bound && local(cl.id) < cl.bound;
}

void World::lapse_check(ClientState& cl) {
  if (cl.lock != Lock::holding || !cl.have_bound || local(cl.id) < cl.bound) return;
  ++res_.c.lapses;
  trace("c" + std::to_string(cl.id) + " lease lapsed (validity_expired)");
  if (cfg_.check_liveness && cl.handed_at >= settled_from_ && settled_from_ > 0) {
    fail("L1: c" + std::to_string(cl.id) + "'s lease, handed out on a settled ensemble, lapsed");
  }
  cl.lock = Lock::releasing;
  if (cl.connected) client_send(cl.id, k_delete);
}

// A lease is handed out only while the bound covers it (lock_attempt.hpp,
// invariant 7); V1 and V3 are checked at that instant.
void World::maybe_hand_out(ClientState& cl) {
  if (cl.lock != Lock::granted) return;
  if (!cl.have_bound || local(cl.id) >= cl.bound) return;  // held back until the bound rises
  for (const auto& other : clients_) {
    if (other.id != cl.id && valid(other)) {
      fail("V1: c" + std::to_string(cl.id) + " handed token " + std::to_string(cl.node) + " while c" +
           std::to_string(other.id) + "'s lease (token " + std::to_string(other.node) + ") reports valid() for " +
           std::to_string((other.bound - local(other.id)) / kMs) + " ms more");
      return;
    }
  }
  if (cl.node <= last_token_) fail("V3: token " + std::to_string(cl.node) + " after " + std::to_string(last_token_));
  last_token_ = cl.node;
  cl.lock = Lock::holding;
  // Mostly short holds; while faults run, one in ten outlasts a session
  // timeout or three (a holder that works long is the one a deposed leader
  // misleads).
  const bool long_hold = now_ < tail_from_ && rng_.chance(100);
  cl.hold_until = local(cl.id) + 50 * kMs +
                  static_cast<Micros>(rng_.below(static_cast<std::uint64_t>(long_hold ? 3 * cfg_.timeout : 2500 * kMs)));
  cl.handed_at = cl.last_handout = now_;
  ++res_.c.handouts;
  trace("c" + std::to_string(cl.id) + " holds token " + std::to_string(cl.node));
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
