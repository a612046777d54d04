// The users of locks: single-lock clients (exclusive or shared, some
// pipelined: two owners on one session started back to back on one lock),
// and multi-lock clients that take several locks in path order and release
// them all. They hold for a random while, cancel some waits, and retry.
// Some single exclusive actors retain: a release keeps the node idle for a
// while, and their next acquisition of the same lock is a re-take.
#include "sim_world.hpp"

namespace zklock::sim {

using detail::MachineOutcome;
using detail::MachineEvent;
using Kind = MachineEvent::Kind;
using Cmd = MachineOutcome::Kind;
using Phase = detail::LockMachine::Phase;

namespace {

// Not handed out yet: acquiring, or granted and waiting for its proof.
bool waiting(const MachineRec& rec) { return rec.m->phase() == Phase::acquiring || rec.m->phase() == Phase::proving; }

}  // namespace

void World::on_outcome(int id, const MachineOutcome& c) {
  auto& rec = machines_[static_cast<std::size_t>(id)];
  auto& a = actors_[static_cast<std::size_t>(rec.actor)];
  const std::string who = "m" + std::to_string(id);
  switch (c.kind) {
    case Cmd::granted:
      // Granted again only by a re-take, after the previous lease was released.
      if (rec.granted != rec.released || rec.failed) violate("outcome: " + who + " granted while granted, or after failing");
      if (rec.granted > 0) {
        ++counters_.retakes;
        // (7) Fairness of retained locks: no re-take once the retainer was
        // told of a waiter (unless a later listing showed it gone).
        if (rec.waiter_told) violate("fairness (7): " + who + " re-took " + rec.held_path + " after its session delivered the watch event showing a waiter");
      }
      // (8) A lease is handed out only in a step whose clock says the
      // validity bound covers it (lock_machine.hpp, invariant 9).
      if (!bound_now_) violate("validity (8): " + who + " handed out a lease while the validity bound had lapsed");
      ++rec.granted;
      rec.release_requested = rec.must_lose = rec.knew_at_release = false;
      rec.held_path = locks_[static_cast<std::size_t>(rec.lock)] + "/" + rec.m->node_name();
      rec.token = {c.token, c.ordinal};
      ++counters_.grants;
      if (a.asked_on_dead_session != 0 && rec.session != a.asked_on_dead_session) {
        ++counters_.regrants_after_dead_session;
        a.asked_on_dead_session = 0;
      }
      holders_[static_cast<std::size_t>(rec.lock)].push_back(id);
      check_grant(id);
      if (a.state == Actor::releasing) {
        actor_release(rec.actor);
      } else if (a.kind == Actor::multi && a.ms.size() < a.locks.size()) {
        start_machine(rec.actor, a.locks[a.ms.size()], a.mode);
      } else {
        a.state = Actor::holding;
        a.cancel_armed = false;
        a.wake = now_ + 1 + rng_.below(hold_max_);
      }
      return;
    case Cmd::failed:
      if (++rec.failed > 1 || rec.granted) violate("outcome: " + who + " failed twice, or after a grant");
      if (a.kind == Actor::multi) actor_release(rec.actor);
      actor_settle(rec.actor);
      return;
    case Cmd::lost:
      ++counters_.lost;
      if (++rec.lost > 1) violate("loss: " + who + " reported lost twice");
      if (!rec.granted) violate("loss: " + who + " reported lost without a grant");
      // The user sees the lease lost and gives up (all locks, for a multi-lock client).
      if (a.state == Actor::holding) a.wake = std::min(a.wake, now_ + 1 + rng_.below(5));
      else if (a.state == Actor::acquiring) actor_release(rec.actor);
      return;
    case Cmd::released: {
      if (++rec.released > rec.granted) violate("outcome: " + who + " released more often than granted");
      auto& hs = holders_[static_cast<std::size_t>(rec.lock)];
      std::erase(hs, id);
      if (rec.m->phase() == Phase::retained) {
        ++counters_.retains;
        a.retained = id;
        a.retain_until = now_ + 1 + rng_.below(80);
      }
      actor_settle(rec.actor);
      return;
    }
    case Cmd::retake_void:
      // Queue anew, on the same lock: the machine's remove went out first.
      ++counters_.retakes_void;
      if (a.state != Actor::acquiring) violate("outcome: " + who + " re-take voided with no re-take asked");
      std::erase(a.ms, id);
      start_machine(rec.actor, rec.lock, a.mode);
      return;
    default: return;
  }
}

void World::actor_tick(int ai) {
  auto& a = actors_[static_cast<std::size_t>(ai)];
  switch (a.state) {
    case Actor::idle: actor_start(ai); return;
    case Actor::acquiring:
      a.cancel_armed = false;
      if (!a.ms.empty() && waiting(machines_[static_cast<std::size_t>(a.ms.back())])) {
        MachineEvent ev{Kind::cancel};
        ev.errc = Errc::timeout;
        ev.detail = "timed out (simulated)";
        feed(a.ms.back(), ev);
      }
      return;
    case Actor::holding: actor_release(ai); return;
    case Actor::releasing: return;
  }
}

void World::actor_start(int ai) {
  auto& a = actors_[static_cast<std::size_t>(ai)];
  a.state = Actor::acquiring;
  a.cancel_armed = !tail_ && rng_.chance(150);
  a.wake = now_ + 1 + rng_.below(300);
  if (a.kind == Actor::multi) {
    start_machine(ai, a.locks[0], a.mode);
    return;
  }
  const int lock = static_cast<int>(rng_.below(locks_.size()));
  const auto& slot = slots_[static_cast<std::size_t>(a.slot)];
  if (a.retained >= 0 && (slot.state == Slot::server_expired || slot.state == Slot::replacing)) {
    a.asked_on_dead_session = slot.sid;  // its node died (or dies) with that session
  }
  if (a.retained >= 0) {
    const int m = std::exchange(a.retained, -1);
    auto& rec = machines_[static_cast<std::size_t>(m)];
    if (rec.m->phase() == Phase::retained) {
      if (rec.lock == lock || rng_.chance(600)) {  // the same lock again: re-take
        a.ms.push_back(m);
        // The shell's clock against the validity bound: lapsed once
        // disconnected past it, and now and then while connected (a pause,
        // or a heartbeat late under load).
        MachineEvent ev{Kind::retake};
        ev.within_bound = !slots_[static_cast<std::size_t>(a.slot)].validity_sent && !rng_.chance(100);
        // The watchdog's clock: mostly a listing confirmed the node recently.
        ev.confirmed = !rng_.chance(20);
        feed(m, ev);
        return;
      }
      feed(m, MachineEvent{Kind::retain_over});  // another lock: give the idle one up
    }
  }
  const int partner = a.partner;
  start_machine(ai, lock, a.mode);
  if (partner >= 0 && actors_[static_cast<std::size_t>(partner)].state == Actor::idle) {
    auto& b = actors_[static_cast<std::size_t>(partner)];
    b.state = Actor::acquiring;
    b.cancel_armed = false;
    start_machine(partner, lock, b.mode);
  }
}

// Release every granted lock of the attempt, and stop waiting for the rest.
void World::actor_release(int ai) {
  auto& a = actors_[static_cast<std::size_t>(ai)];
  a.state = Actor::releasing;
  const auto ms = a.ms;
  for (int id : ms) {
    auto& rec = machines_[static_cast<std::size_t>(id)];
    if (rec.granted && !rec.release_requested) {
      check_told(id);
      rec.release_requested = true;
      rec.knew_at_release = rec.must_lose && rec.lost == 0 && !rec.m->holding();
      // Now and then the owner has another acquisition under way in this
      // client: the release may not keep the node (lock_attempt.hpp (6)).
      MachineEvent ev{Kind::release};
      ev.may_retain = !rng_.chance(50);
      feed(id, ev);
    } else if (!rec.granted && !rec.failed && waiting(rec)) {
      MachineEvent ev{Kind::cancel};
      ev.errc = Errc::cancelled;
      ev.detail = "giving up (simulated)";
      feed(id, ev);
    }
  }
  actor_settle(ai);
}

// The attempt is over once every machine of it failed or was released.
void World::actor_settle(int ai) {
  auto& a = actors_[static_cast<std::size_t>(ai)];
  if (a.state == Actor::idle) return;
  for (int id : a.ms) {
    const auto& rec = machines_[static_cast<std::size_t>(id)];
    if (!rec.failed && !rec.released) return;
    if (rec.granted > rec.released) return;
  }
  a.state = Actor::idle;
  a.ms.clear();
  a.cancel_armed = false;
  a.wake = now_ + 1 + rng_.below(30);
}

// The retain time of an idle retained node ran out (the shell's timer).
void World::retain_deadline(int ai) {
  auto& a = actors_[static_cast<std::size_t>(ai)];
  const int m = std::exchange(a.retained, -1);
  if (m >= 0 && machines_[static_cast<std::size_t>(m)].m->phase() == Phase::retained) {
    feed(m, MachineEvent{Kind::retain_over});
  }
}

}  // namespace zklock::sim
