// The recipe after the grant: our node watched, the session's changes, loss, release, cleanup.
//
// Our own node (revoked or expired), the session's changes and the
// obligations they leave, release, and cleanup of what an attempt leaves
// behind. Up to the grant: lock_machine_acquire.cpp; a retained node and its
// re-take: lock_machine_retain.cpp; the dispatch: lock_machine.cpp.
#include <algorithm>
#include <utility>

#include "lock_machine.hpp"
#include "zklock/protocol/revocation.hpp"

namespace zklock::detail {
namespace {

using Kind = MachineEvent::Kind;
using Req = MachineRequest::Kind;
using Out = MachineOutcome::Kind;

}  // namespace

void LockMachine::on_release(const MachineEvent& ev, Commands& out) {
  if (phase_ != Phase::held) return;
  // Our node went away while held and the record is not read yet: the
  // holder still learns that its lease was lost before the release. (Held,
  // a node gone that we did not delete is a revocation: an expiry is a loss
  // already.)
  const bool revoked = own_.state == NodeState::gone;
  if (revoked) lose(LossReason::revoked, "node deleted by another client (released before its record was read)", out);
  const bool keep = cfg_.retain && ev.may_retain && nobody_queued() && !loss_ && own_.state == NodeState::exists &&
                    link_ == Link::up && doubt_ == Doubt::none && duties_.extras.empty();
  if (keep) {
    // Invariant (5): nobody is known to wait, and the children watch will
    // say when someone queues. The node stays, idle; no request is sent.
    phase_ = Phase::retained;
    report(out, MachineOutcome{Out::released});
    return;
  }
  phase_ = Phase::releasing;
  if (doubt_ != Doubt::none) sweep(out);  // a lost create may have left a second node of ours
  // Invariant (3): the marker only for a granted node we still own, and
  // only if someone may be woken by its deletion.
  remove_own(!revoked && !nobody_queued() ? Duty::remove_marked : Duty::remove, out);
}

// nobody_queued(): nobody queued behind us since a listing that showed us
// alone; that listing set the children watch, which is armed and has not
// fired. The marker only saves a waiter woken by our deletion a listing; a
// node created after our delete lists without us, so the release deletes
// alone (a plain delete, not a multi that also rewrites the lock path). If
// a waiter did queue and its notification is still on the way, it finds the
// marker not naming us and lists again: one read more, never a wrong grant.

void LockMachine::watch_own(Commands& out) {
  duties_.drop(Duty::watch_own);
  own_.covered = false;
  own_.watch_tag = next_tag();
  send(out, Req::watch_own, own_.watch_tag, own_.name);
}

// Our node was deleted and we did not delete it: a revocation (its record was
// written in the same transaction) or the session's end.
void LockMachine::on_own_gone(Commands& out) {
  if (own_.state != NodeState::exists) return;
  own_.state = NodeState::gone;
  own_.watch_tag = 0;
  if (phase_ == Phase::retained) {  // revoked while idle: no lease to tell
    phase_ = Phase::released;
    notice(out, "retained node " + own_.name + " of " + cfg_.lock_path + " was deleted while idle (revoked?)");
    return;
  }
  if (!acquiring() && !granted()) return;
  round_.abandon();
  duties_.drop(Duty::relist);
  read_record(out);
}

void LockMachine::read_record(Commands& out) {
  duties_.drop(Duty::read_record);
  record_tag_ = next_tag();
  send(out, Req::read_record, record_tag_, own_.name);
}

void LockMachine::on_record(const MachineEvent& ev, Commands& out) {
  if (ev.rc == Rc::connection_loss) {
    // Typically the server expired the session: the session event decides,
    // or the record is read again once the same session is back.
    duties_.add(Duty::read_record);
    return;
  }
  std::string detail = "node deleted by another client (no revocation record)";
  if (ev.rc == Rc::ok) {
    auto rec = protocol::decode_revocation_record(ev.data);
    detail = rec ? protocol::revocation_message(*rec) : "revoked (unreadable record: " + ev.data.substr(0, 200) + ")";
  } else if (ev.rc == Rc::error) {
    detail = "node deleted by another client (revocation record unreadable: " + ev.detail + ")";
  }
  if (granted()) {
    lose(LossReason::revoked, detail, out);
  } else if (acquiring()) {
    fail(Errc::deadlock_victim, "deadlock victim: our wait for " + cfg_.lock_path + " was revoked; " + detail, out);
  }
}

void LockMachine::on_session(const MachineEvent& ev, Commands& out) {
  if (ev.epoch != cfg_.epoch) return;
  switch (ev.kind) {
    case Kind::disconnected:
      link_ = Link::down;
      if (phase_ == Phase::retained) end_retention(out);  // no lease: give it up (sent once reconnected)
      if (granted() && cfg_.holder.policy == LossPolicy::strict) {
        lose(LossReason::disconnected, "disconnected from ZooKeeper (strict policy)", out);
      }
      break;
    case Kind::validity_expired:
      if (phase_ == Phase::retained) end_retention(out);  // the node may be gone: no re-take on it
      if (phase_ == Phase::held) {
        lose(LossReason::validity_expired, "the validity bound passed; the session may have expired", out);
        // Still connected (a pause, or answers the leader never ordered):
        // give the lock up now; a disconnected holder does on reconnect.
        if (link_ == Link::up && own_.state == NodeState::exists) remove_own(Duty::remove_marked, out);
      }
      break;
    case Kind::reconnected:
      link_ = Link::up;
      replay(out);
      break;
    case Kind::expired:
      on_expired(out);
      break;
    case Kind::created: case Kind::parents_made: case Kind::listed: case Kind::stats_read:
    case Kind::blocker_checked: case Kind::marker_read: case Kind::own_checked: case Kind::record_read:
    case Kind::removed: case Kind::blocker_probed: case Kind::blocker_deleted: case Kind::own_deleted:
    case Kind::own_changed: case Kind::children_changed: case Kind::validity_proven: case Kind::watchdog:
    case Kind::cancel: case Kind::release: case Kind::retake: case Kind::retain_over:
      break;  // not a change of the session (step() sends only the four above here)
  }
}

// The same session is back: the obligations, in Duty's order.
void LockMachine::replay(Commands& out) {
  static constexpr Duty kOrder[] = {Duty::watch_own, Duty::read_record, Duty::remove, Duty::remove_marked,
                                    Duty::extras,    Duty::sweep,       Duty::relist};
  for (const Duty d : kOrder) {
    if (!duties_.has(d)) continue;
    switch (d) {
      case Duty::watch_own:
        if (own_.state == NodeState::exists) watch_own(out);
        break;
      case Duty::read_record:
        if (acquiring() || granted()) read_record(out);
        break;
      case Duty::remove:
      case Duty::remove_marked:
        remove_own(d, out);
        break;
      case Duty::extras:
        for (const auto& name : duties_.extras) resend_extra(name, out);
        break;
      case Duty::sweep:
        sweep(out);
        break;
      case Duty::relist:
        if (acquiring()) {
          duties_.drop(Duty::relist);
          relist(out);
        }
        break;
    }
  }
}

// Ephemeral: every node of ours went with the session.
void LockMachine::on_expired(Commands& out) {
  link_ = Link::over;
  own_.state = NodeState::gone;
  doubt_ = Doubt::none;  // a lost create of this session cannot apply now: nothing to sweep
  duties_ = {};
  round_.list_tag = 0;
  remove_tag_ = 0;
  switch (phase_) {
    case Phase::proving:
    case Phase::held:
      lose(LossReason::session_expired, "the ZooKeeper session expired", out);
      break;
    case Phase::acquiring:
      fail(Errc::session_expired, "the ZooKeeper session expired while waiting for " + cfg_.lock_path, out);
      break;
    case Phase::releasing:
      phase_ = Phase::released;
      report(out, MachineOutcome{Out::released});
      break;
    case Phase::retained:
    case Phase::ending:
      phase_ = Phase::released;  // the retention ends silently: no lease exists
      break;
    case Phase::idle:
    case Phase::failed:
    case Phase::released:
      break;  // no lease, nothing under way: nothing to tell
  }
}

void LockMachine::lose(LossReason reason, std::string message, Commands& out) {
  if (phase_ == Phase::proving) {  // invariant (9): nobody holds a lease yet
    withdraw(reason == LossReason::revoked ? Errc::deadlock_victim : Errc::session_expired,
             "granted " + cfg_.lock_path + ", then lost before the session's validity was proven: " + message, out);
    return;
  }
  if (loss_ || phase_ != Phase::held) return;  // invariant (2)
  loss_ = reason;
  loss_detail_ = message;
  // Disconnected: a lease we cannot prove any more; once the same session is
  // back, the lock is given up (granted: with the marker).
  if (link_ != Link::up && own_.state == NodeState::exists) duties_.add(Duty::remove_marked);
  MachineOutcome c{Out::lost};
  c.reason = reason;
  c.message = std::move(message);
  report(out, std::move(c));
}

// `kind`: Duty::remove, or Duty::remove_marked for the marker (invariant 3).
void LockMachine::remove_own(Duty kind, Commands& out) {
  duties_.drop(Duty::remove);
  duties_.drop(Duty::remove_marked);
  if (own_.state != NodeState::exists) {
    if (own_.state != NodeState::deleting) release_done(out);
    return;
  }
  own_.state = NodeState::deleting;
  own_.removal = kind;
  remove_tag_ = next_tag();
  send(out, Req::remove, remove_tag_, own_.name);
  out.requests.back().with_marker = kind == Duty::remove_marked;
}

void LockMachine::on_removed(const MachineEvent& ev, Commands& out) {
  if (ev.tag != 0 && ev.tag == barrier_tag_) {
    barrier_tag_ = 0;
    // The write ran (as a delete of nothing): every lost create of ours ran before it.
    if (doubt_ != Doubt::none) doubt_ = ev.rc != Rc::connection_loss ? Doubt::barrier_ran : Doubt::open;
    return;
  }
  if (auto it = duties_.extra_tags.find(ev.tag); it != duties_.extra_tags.end()) {
    const auto name = it->second;
    duties_.extra_tags.erase(it);
    if (ev.rc == Rc::connection_loss) return;  // stays in extras: resent on reconnect
    std::erase(duties_.extras, name);
    return;
  }
  if (ev.tag == 0 || ev.tag != remove_tag_) return;
  remove_tag_ = 0;
  if (ev.rc == Rc::connection_loss) {
    own_.state = NodeState::exists;  // maybe; resent once the same session is back
    if (link_ == Link::up) remove_own(own_.removal, out);
    else duties_.add(own_.removal);
    return;
  }
  if (ev.rc == Rc::error && own_.removal == Duty::remove_marked) {
    own_.state = NodeState::exists;
    remove_own(Duty::remove, out);  // the marker's half failed (say, no access): delete alone
    return;
  }
  own_.state = NodeState::gone;  // ok, no_node; or an error we cannot act on
  release_done(out);
}

void LockMachine::release_done(Commands& out) {
  if (phase_ == Phase::releasing) {
    phase_ = Phase::released;
    report(out, MachineOutcome{Out::released});
  } else if (phase_ == Phase::ending) {
    phase_ = Phase::released;  // the lease's `released` was reported when it was retained
  }
}

void LockMachine::remove_extra(const std::string& name, Commands& out) {
  auto& extras = duties_.extras;
  if (std::find(extras.begin(), extras.end(), name) == extras.end()) extras.push_back(name);
  resend_extra(name, out);
}

void LockMachine::resend_extra(const std::string& name, Commands& out) {
  const auto tag = next_tag();
  duties_.extra_tags[tag] = name;
  send(out, Req::remove_extra, tag, name);
}

// After an attempt ends with a create whose answer was lost: list, and delete
// every node carrying our GUID that we do not already delete. A write goes
// first — the delete of a name no one creates — so that a lost create still
// in the server's pipeline is applied before the listing runs: a read may be
// answered ahead of a write forwarded earlier, a later write may not.
void LockMachine::sweep(Commands& out) {
  duties_.add(Duty::sweep);
  if (link_ != Link::up || round_.list_tag != 0) return;
  doubt_ = Doubt::open;
  barrier_tag_ = next_tag();
  send(out, Req::remove_extra, barrier_tag_, "zklock-sweep-barrier-" + cfg_.guid);
  round_.list_tag = next_tag();
  send(out, Req::list, round_.list_tag);
}

void LockMachine::on_sweep(const MachineEvent& ev, const Listing& listing, Commands& out) {
  if (ev.rc == Rc::connection_loss || doubt_ != Doubt::barrier_ran) {  // proves nothing: again once connected
    sweep(out);
    return;
  }
  duties_.drop(Duty::sweep);
  if (own_.state == NodeState::unknown) own_.state = NodeState::none;  // found below, or it never ran
  if (ev.rc != Rc::ok) return;                                        // no_node: the lock path is gone, so is ours
  for (const auto& e : listing.nodes) {
    if (!ours(e.node.guid)) continue;
    if (e.node.name == own_.name && (own_.state == NodeState::exists || own_.state == NodeState::deleting)) continue;
    remove_extra(e.node.name, out);
  }
}

}  // namespace zklock::detail
