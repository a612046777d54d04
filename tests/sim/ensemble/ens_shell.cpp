// The ensemble simulator's shell, its decisions-free half (ens_shell.hpp):
// the users of the locks, the events fed to each LockMachine with the
// shell's clock reading, the machines' outcomes, and V1 and V3 at every
// hand-out.
#include <string>

#include "ens_world.hpp"

namespace zklock::ensim {

using detail::LockMachine;
using detail::MachineEvent;
using detail::MachineOutcome;
using EvKind = MachineEvent::Kind;
using Out = MachineOutcome::Kind;

namespace {
ClientState& client_of(std::vector<ClientState>& v, int proc) { return v[static_cast<std::size_t>(proc - kServers)]; }
std::string hex64(std::uint64_t v) {
  static const char* d = "0123456789abcdef";
  std::string s(16, '0');
  for (int i = 15; i >= 0; --i, v >>= 4) s[static_cast<std::size_t>(i)] = d[v & 15];
  return s;
}
std::string token_text(const std::pair<std::int64_t, std::int64_t>& t) {
  return std::to_string(t.first) + (t.second ? "." + std::to_string(t.second) : std::string());
}
}  // namespace

// The waiting watchdog's period (ClientOptions::wait_check's default: the
// session timeout, at least 500 ms).
static Micros wait_check(Micros timeout) { return std::max<Micros>(timeout, 500 * kMs); }

// The user of a client, on every client tick while connected: one lock at a
// time, acquired, held, released; a retaining client asks again soon, often
// for the lock it keeps.
void World::shell_tick(ClientState& cl) {
  if (cl.session == 0) return;
  const Micros t = local(cl.id);
  if (cl.retained >= 0 && t >= cl.retain_until) {
    const int r = std::exchange(cl.retained, -1);
    feed(r, MachineEvent{EvKind::retain_over});
  }
  for (const int id : std::vector<int>(cl.ms)) {
    EnsMachine& m = machines_[static_cast<std::size_t>(id)];
    if (m.confirm_due >= 0 && t >= m.confirm_due) {  // the machine lists only if still retained
      m.confirm_due = -1;
      ++res_.c.confirm_checks;
      feed(id, MachineEvent{EvKind::watchdog});
    }
    if (m.blocker_tag == 0 || !m.m->waits_on(m.blocker_tag) || t - m.blocker_since < wait_check(cfg_.timeout)) continue;
    m.blocker_since = t;
    ++res_.c.watchdogs;
    feed(id, MachineEvent{EvKind::watchdog});
  }
  if (cl.want == Want::acquiring && cl.active >= 0 && cl.give_up_at > 0 && t >= cl.give_up_at) {
    cl.give_up_at = 0;
    MachineEvent ev{EvKind::cancel};
    ev.errc = Errc::timeout;
    ev.detail = "the acquisition timed out";
    feed(cl.active, std::move(ev));
  } else if (cl.want == Want::holding && cl.active >= 0 && t >= cl.hold_until) {
    release_lease(cl, cl.active);
  } else if (cl.want == Want::idle && t >= cl.idle_until) {
    const bool same = cl.retained >= 0 && shell_rng_.chance(700);
    cl.lock = same ? machines_[static_cast<std::size_t>(cl.retained)].lock : static_cast<int>(shell_rng_.below(locks_.size()));
    cl.want = Want::acquiring;
    // While the faults run, a third of the acquisitions have a deadline.
    cl.give_up_at = now_ < cfg_.fault_time && shell_rng_.chance(333)
                        ? t + cfg_.timeout / 2 + static_cast<Micros>(shell_rng_.below(static_cast<std::uint64_t>(3 * cfg_.timeout)))
                        : 0;
    if (cl.retained >= 0 && machines_[static_cast<std::size_t>(cl.retained)].lock == cl.lock) {
      const int r = std::exchange(cl.retained, -1);
      EnsMachine& m = machines_[static_cast<std::size_t>(r)];
      if (m.m->may_retake(m.m->config().holder)) {
        cl.active = r;
        MachineEvent ev{EvKind::retake};
        ev.confirmed = m.listed_at >= 0 && t - m.listed_at < wait_check(cfg_.timeout);
        feed(r, std::move(ev));
        return;
      }
    }
    start_machine(cl, cl.lock);
  }
}

void World::start_machine(ClientState& cl, int lock) {
  EnsMachine rec;
  rec.client = cl.id;
  rec.lock = lock;
  rec.session = cl.session;
  rec.guid = hex64(shell_rng_.next()) + hex64(shell_rng_.next());
  detail::MachineConfig mc;
  mc.mode = Mode::exclusive;
  mc.guid = rec.guid;
  mc.holder.owner = "c" + std::to_string(cl.id);
  mc.epoch = cl.session;
  mc.lock_path = locks_[static_cast<std::size_t>(lock)];
  mc.retain = cl.retains;
  mc.history = rec.guid.back() < '8' ? detail::LockHistory::free : detail::LockHistory::contended;
  rec.m = std::make_unique<LockMachine>(mc);
  machines_.push_back(std::move(rec));
  const int id = static_cast<int>(machines_.size()) - 1;
  by_guid_[machines_.back().guid.substr(0, 24)] = id;
  cl.ms.push_back(id);
  cl.active = id;
  ++res_.c.machines;
  run_commands(id, machines_.back().m->start());
}

// The shell's clock on every event: the client's bound is ahead of its
// local clock on the machine's session. Bypassed (test only), every event
// claims it is.
void World::feed(int id, MachineEvent ev) {
  EnsMachine& m = machines_[static_cast<std::size_t>(id)];
  if (m.finished) return;
  const ClientState& cl = client_of(clients_, m.client);
  ev.epoch = m.session;
  ev.within_bound = cfg_.bypass_proving || (cl.session == m.session && within_bound(cl));
  const bool proving = m.m->phase() == LockMachine::Phase::proving;
  const auto confirmations = m.m->confirmations();
  const auto cmds = m.m->step(ev);
  // As the library's shell: the step whose listing showed our node times a
  // re-take's `confirmed`.
  if (m.m->confirmations() != confirmations) m.listed_at = local(m.client);
  if (proving && m.m->phase() == LockMachine::Phase::held) ++res_.c.proved_later;
  if (proving && m.m->phase() == LockMachine::Phase::failed) ++res_.c.withdrawn;
  run_commands(id, cmds);
}

void World::session_event(ClientState& cl, EvKind kind, std::uint64_t epoch) {
  for (const int id : std::vector<int>(cl.ms)) {
    if (machines_[static_cast<std::size_t>(id)].session == epoch) feed(id, MachineEvent{kind});
  }
}

// Requests first, then outcomes (MachineCommands).
void World::run_commands(int id, const detail::MachineCommands& cmds) {
  for (const auto& r : cmds.requests) execute(id, r);
  for (const auto& o : cmds.outcomes) on_outcome(id, o);
  settle(id);
}

void World::settle(int id) {
  EnsMachine& m = machines_[static_cast<std::size_t>(id)];
  if (m.finished || !m.m->finished()) return;
  m.finished = true;
  ClientState& cl = client_of(clients_, m.client);
  std::erase(cl.ms, id);
  if (cl.retained == id) cl.retained = -1;
}

void World::on_outcome(int id, const MachineOutcome& o) {
  EnsMachine& m = machines_[static_cast<std::size_t>(id)];
  ClientState& cl = client_of(clients_, m.client);
  const Micros t = local(cl.id);
  const std::string who = "c" + std::to_string(cl.id) + " m" + std::to_string(id) + " ";
  switch (o.kind) {
    case Out::granted: hand_out(id, o); return;
    case Out::failed:
      trace(who + "failed: " + o.message);
      if (cl.active == id) {
        cl.active = -1;
        cl.want = Want::idle;
        cl.idle_until = t + static_cast<Micros>(shell_rng_.below(500 * kMs));
      }
      return;
    case Out::lost:
      ++res_.c.lost;
      trace(who + "lost " + m.path + ": " + o.message);
      m.leased = false;
      if (cl.active == id) cl.hold_until = t;  // the user lets go at its next look
      return;
    case Out::released: trace(who + "released"); return;
    case Out::retake_void:
      ++res_.c.retakes_void;
      trace(who + "re-take void: " + o.message);
      if (cl.active == id) start_machine(cl, m.lock);
      return;
    case Out::diverged:
    case Out::notice: trace(who + o.message); return;
  }
}

// lease.valid(): granted and holding as the machine knows, on the client's
// current session, its bound ahead of the client's clock.
bool World::lease_valid(const EnsMachine& m) const {
  const ClientState& cl = clients_[static_cast<std::size_t>(m.client - kServers)];
  return m.leased && m.m->holding() && cl.session == m.session && within_bound(cl);
}

// A lease is handed out: V1 (no other lease of the lock reports valid(),
// and, unless bypassed, this one's bound covers it) and V3 (tokens rise).
void World::hand_out(int id, const MachineOutcome& o) {
  EnsMachine& m = machines_[static_cast<std::size_t>(id)];
  ClientState& cl = client_of(clients_, m.client);
  m.path = locks_[static_cast<std::size_t>(m.lock)] + "/" + m.m->node_name();
  m.token = {o.token, o.ordinal};
  const std::string who = "c" + std::to_string(cl.id) + " (token " + token_text(m.token) + " on " + m.path + ")";
  if (!cfg_.bypass_proving && !within_bound(cl)) fail("V1: " + who + " handed out while its own bound has lapsed");
  if (!revoked_.count(m.path)) {
    for (const auto& other : clients_) {
      for (const int oid : other.ms) {
        const EnsMachine& om = machines_[static_cast<std::size_t>(oid)];
        if (oid == id || om.lock != m.lock || !lease_valid(om) || revoked_.count(om.path)) continue;
        fail("V1: " + who + " handed out while c" + std::to_string(other.id) + "'s lease (token " +
             token_text(om.token) + ") reports valid() for " + std::to_string((other.bound - local(other.id)) / kMs) +
             " ms more");
        return;
      }
    }
    auto& last = last_token_[static_cast<std::size_t>(m.lock)];
    if (m.token <= last) fail("V3: " + who + " after token " + token_text(last));
    last = m.token;
  }
  if (o.ordinal > 0) ++res_.c.retakes;
  m.leased = true;
  m.handed_at = cl.last_handout = now_;
  cl.active = id;
  cl.want = Want::holding;
  // Mostly short holds; while faults run, one in ten outlasts a session
  // timeout or three (a holder that works long is the one a deposed leader
  // misleads).
  const bool long_hold = now_ < tail_from_ && shell_rng_.chance(100);
  cl.hold_until = local(cl.id) + 50 * kMs +
                  static_cast<Micros>(shell_rng_.below(static_cast<std::uint64_t>(long_hold ? 3 * cfg_.timeout : 2500 * kMs)));
  ++res_.c.handouts;
  trace(who + " handed out");
}

// The user releases: a retaining client keeps the node idle (one at a time)
// when the machine may; the owner has nothing else under way here.
void World::release_lease(ClientState& cl, int id) {
  EnsMachine& m = machines_[static_cast<std::size_t>(id)];
  const Micros t = local(cl.id);
  m.leased = false;
  cl.active = -1;
  cl.want = Want::idle;
  cl.idle_until = t + static_cast<Micros>(shell_rng_.below(cl.retains ? 300 * kMs : 500 * kMs));
  MachineEvent ev{EvKind::release};
  ev.may_retain = cl.retains && cl.retained < 0;
  feed(id, std::move(ev));
  if (!m.finished && m.m->phase() == LockMachine::Phase::retained) {
    ++res_.c.retains;
    cl.retained = id;
    cl.retain_until = t + static_cast<Micros>(shell_rng_.below(static_cast<std::uint64_t>(cfg_.timeout)));
    // As the library's shell: the confirmation is due three quarters of the
    // period after the latest listing that showed the node.
    if (m.confirm_due < 0) m.confirm_due = std::max(t, m.listed_at + wait_check(cfg_.timeout) * 3 / 4);
  }
}

}  // namespace zklock::ensim
