// The recipe after the grant: our node watched, the session's changes, loss, release, retention, cleanup.
//
// Our own node (revoked or expired), the session's changes, release — at
// once, or retained for a re-take — and cleanup of what an attempt leaves
// behind. Up to the grant: lock_machine_acquire.cpp; the dispatch:
// lock_machine.cpp.
#include <algorithm>
#include <utility>

#include "lock_machine.hpp"
#include "zklock/protocol/revocation.hpp"

namespace zklock::detail {
namespace {

using Kind = MachineEvent::Kind;
using Cmd = MachineCommand::Kind;

}  // namespace

void LockMachine::on_release(Commands& out) {
  if (phase_ != Phase::held) return;
  // Our node went away while held and the record is not read yet: the
  // holder still learns that its lease was lost before the release.
  if (revoked_) lose(LossReason::revoked, "node deleted by another client (released before its record was read)", out);
  const bool keep = retaining() && !waiter_known_ && children_tag_ != 0 && !loss_ && !revoked_ &&
                    node_ == NodeState::exists && connected_ && !ever_uncertain_ && extras_.empty();
  if (keep) {
    // Invariant (5): nobody is known to wait, and the children watch will
    // say when someone queues. The node stays, idle; no request is sent.
    phase_ = Phase::retained;
    out.push_back(MachineCommand{Cmd::released});
    return;
  }
  phase_ = Phase::releasing;
  if (ever_uncertain_) sweep(out);  // a lost create may have left a second node of ours
  // Invariant (3): the marker only for a granted node we still own, and
  // only if someone may be woken by its deletion.
  remove_own(!revoked_ && !nobody_queued(), out);
}

// Nobody queued behind us since a listing that showed us alone: that
// listing set the children watch, which is armed and has not fired. The
// marker only saves a waiter woken by our deletion a listing; a node created
// after our delete lists without us, so the release deletes alone (a plain
// delete, not a multi that also rewrites the lock path). If a waiter did
// queue and its notification is still on the way, it finds the marker not
// naming us and lists again: one read more, never a wrong grant.
bool LockMachine::nobody_queued() const { return children_tag_ != 0 && children_armed_ && !waiter_known_; }

// The children of the lock changed since our latest watched listing: a
// waiter queued (or a node went, ours perhaps).
void LockMachine::on_children_changed(const MachineEvent& ev, Commands& out) {
  if (ev.tag == 0 || ev.tag != children_tag_) return;  // an older watch: a later listing covers it
  children_tag_ = 0;
  children_armed_ = false;
  waiter_known_ = others_seen_ = true;
  if (phase_ == Phase::retained) {
    end_retention(out);  // hand the lock on at once
    return;
  }
  // Held or waiting with no exists watch on our node: is it still there (6)?
  // Otherwise acquiring: the listings decide; retaking: the re-take's listing.
  cover_own(out);
}

// The re-take: setData on our node with its expected version, then the
// listing, pipelined. Session order puts the listing after the setData's
// transaction (zxid Z): any node created before Z is listed (unless already
// gone), so a re-take that lists only our node grants with token Z, and
// every later waiter is created after Z.
//
// The listing re-arms the children watch only if none is armed. An armed one
// has not fired, so no child changed since it was set; it still tells us of
// the next waiter. The server keeps one watch per path and session anyway,
// but the client keeps a callback per watching call until the watch fires:
// re-arming on every re-take grew that list without bound on a lock re-taken
// for hours with nobody else queueing (and fired all of it at the first
// waiter). If the armed watch fires before this listing is answered, the
// notification comes first (one connection, in order) and clears it: the
// re-take may still grant, but the release then does not retain.
void LockMachine::on_retake(Commands& out) {
  if (phase_ != Phase::retained) return;
  phase_ = Phase::retaking;
  touch_rc_ = Rc::connection_loss;  // until answered
  touch_tag_ = next_tag();
  MachineCommand t = request(Cmd::touch, touch_tag_, name_);
  t.version = version_;
  out.push_back(std::move(t));
  list_tag_ = next_tag();
  if (children_tag_ != 0 && children_armed_) {
    out.push_back(request(Cmd::list, list_tag_));
    return;
  }
  children_tag_ = list_tag_;
  children_armed_ = false;
  out.push_back(request(Cmd::list_watch, list_tag_));
}

void LockMachine::on_retake_listed(const MachineEvent& ev, const Listing& listing, Commands& out) {
  if (touch_tag_ != 0) {  // the setData unanswered before its listing (cannot happen in session order)
    touch_tag_ = 0;
    touch_rc_ = Rc::connection_loss;
  }
  if (ev.rc != Rc::ok) {
    children_tag_ = 0;  // a watch this listing would have set is not known to be set
    children_armed_ = false;
  } else if (ev.tag == children_tag_) {
    children_armed_ = true;
  }
  bool alone = ev.rc == Rc::ok, listed_self = false;
  for (const auto& e : listing.nodes) {  // foreign children are not part of the queue
    if (e.node.name == name_) listed_self = true;
    else alone = false;
  }
  if (touch_rc_ == Rc::ok && alone && listed_self) {
    waiter_known_ = false;
    phase_ = Phase::held;
    MachineCommand c{Cmd::granted};
    c.czxid = retake_mzxid_;  // invariant (5): the setData's zxid is the token
    out.push_back(std::move(c));
    return;
  }
  waiter_known_ = true;
  void_retake(touch_rc_ == Rc::no_node ? "our retained node is gone (session expired or revoked)"
              : touch_rc_ != Rc::ok    ? "the re-take's setData failed or its outcome is unknown"
              : !alone                 ? "another node is queued: queueing behind it"
                                       : "our node is not listed",
              out);
}

// The re-take does not grant: release for real (the remove goes out before
// the caller's new create, so a waiter found by the listing goes first).
void LockMachine::void_retake(std::string why, Commands& out) {
  if (touch_rc_ == Rc::no_node && node_ == NodeState::exists) {
    node_ = NodeState::gone;
    own_tag_ = 0;
    MachineCommand n{Cmd::notice};
    n.message = "retained node " + name_ + " of " + cfg_.lock_path + " was deleted while idle";
    out.push_back(std::move(n));
  }
  phase_ = Phase::ending;
  remove_own(true, out);
  MachineCommand c{Cmd::retake_void};
  c.message = std::move(why);
  out.push_back(std::move(c));
}

void LockMachine::end_retention(Commands& out) {
  phase_ = Phase::ending;
  remove_own(!nobody_queued(), out);  // a granted node: the marker if someone may wait (invariant 3)
}

void LockMachine::watch_own(Commands& out) {
  own_watch_pending_ = false;
  own_watch_off_ = false;
  own_tag_ = next_tag();
  out.push_back(request(Cmd::watch_own, own_tag_, name_));
}

// Our node was deleted and we did not delete it: a revocation (its record was
// written in the same transaction) or the session's end.
void LockMachine::on_own_gone(Commands& out) {
  if (node_ != NodeState::exists) return;
  node_ = NodeState::gone;
  revoked_ = true;
  own_tag_ = 0;
  if (phase_ == Phase::retained) {  // revoked while idle: no lease to tell
    phase_ = Phase::released;
    MachineCommand n{Cmd::notice};
    n.message = "retained node " + name_ + " of " + cfg_.lock_path + " was deleted while idle (revoked?)";
    out.push_back(std::move(n));
    return;
  }
  if (phase_ != Phase::acquiring && phase_ != Phase::held) return;
  list_tag_ = stats_tag_ = blocker_tag_ = marker_tag_ = 0;
  resync_pending_ = false;
  record_tag_ = next_tag();
  out.push_back(request(Cmd::read_record, record_tag_, name_));
}

void LockMachine::on_record(const MachineEvent& ev, Commands& out) {
  if (ev.rc == Rc::connection_loss) {
    // Typically the server expired the session: the session event decides,
    // or the record is read again once the same session is back.
    record_pending_ = true;
    return;
  }
  std::string detail = "node deleted by another client (no revocation record)";
  if (ev.rc == Rc::ok) {
    auto rec = decode_revocation_record(ev.data);
    detail = rec ? revocation_message(*rec) : "revoked (unreadable record: " + ev.data.substr(0, 200) + ")";
  } else if (ev.rc == Rc::error) {
    detail = "node deleted by another client (revocation record unreadable: " + ev.detail + ")";
  }
  if (phase_ == Phase::held) {
    lose(LossReason::revoked, detail, out);
  } else if (acquiring()) {
    fail(Errc::deadlock_victim, "deadlock victim: our wait for " + cfg_.lock_path + " was revoked; " + detail, out);
  }
}

void LockMachine::on_session(const MachineEvent& ev, Commands& out) {
  if (ev.epoch != cfg_.epoch) return;
  switch (ev.kind) {
    case Kind::disconnected:
      connected_ = false;
      suspended_ = true;
      if (phase_ == Phase::retained) end_retention(out);  // no lease: give it up (sent once reconnected)
      if (phase_ == Phase::held && cfg_.policy == LossPolicy::strict) {
        lose(LossReason::disconnected, "disconnected from ZooKeeper (strict policy)", out);
      }
      break;
    case Kind::validity_expired:
      if (phase_ == Phase::held) {
        lose(LossReason::validity_expired, "the validity bound passed; the session may have expired", out);
        // Still connected (a pause, or answers the leader never ordered):
        // give the lock up now; a disconnected holder does on reconnect.
        if (connected_ && node_ == NodeState::exists) remove_own(true, out);
      }
      break;
    case Kind::reconnected:
      connected_ = true;
      suspended_ = false;
      if (own_watch_pending_ && node_ == NodeState::exists) watch_own(out);
      if (record_pending_ && (acquiring() || phase_ == Phase::held)) {
        record_pending_ = false;
        record_tag_ = next_tag();
        out.push_back(request(Cmd::read_record, record_tag_, name_));
      }
      if (phase_ == Phase::held && loss_ && node_ == NodeState::exists) {
        remove_own(true, out);  // a lease we cannot prove any more: give the lock up (granted: marker)
      } else if (remove_pending_) {
        remove_own(pending_marker_, out);
      }
      for (const auto& name : extras_) resend_extra(name, out);
      if (sweep_pending_) sweep(out);
      if (acquiring() && resync_pending_) {
        resync_pending_ = false;
        relist(out);
      }
      break;
    case Kind::expired: {
      connected_ = false;
      // Ephemeral: every node of ours went with the session.
      node_ = NodeState::gone;
      ever_uncertain_ = false;  // a lost create of this session cannot apply now: nothing to sweep
      remove_pending_ = sweep_pending_ = record_pending_ = false;
      extras_.clear();
      list_tag_ = remove_tag_ = 0;
      if (phase_ == Phase::held) {
        lose(LossReason::session_expired, "the ZooKeeper session expired", out);
      } else if (acquiring()) {
        fail(Errc::session_expired, "the ZooKeeper session expired while waiting for " + cfg_.lock_path, out);
      } else if (phase_ == Phase::releasing) {
        phase_ = Phase::released;
        out.push_back(MachineCommand{Cmd::released});
      } else if (phase_ == Phase::retaking) {
        phase_ = Phase::released;
        MachineCommand c{Cmd::retake_void};
        c.message = "the ZooKeeper session expired";
        out.push_back(std::move(c));
      } else if (phase_ == Phase::retained || phase_ == Phase::ending) {
        phase_ = Phase::released;  // the retention ends silently: no lease exists
      }
      break;
    }
    default:
      break;
  }
}

void LockMachine::lose(LossReason reason, std::string message, Commands& out) {
  if (loss_ || phase_ != Phase::held) return;  // invariant (2)
  loss_ = reason;
  MachineCommand c{Cmd::lost};
  c.reason = reason;
  c.message = std::move(message);
  out.push_back(std::move(c));
}

void LockMachine::remove_own(bool with_marker, Commands& out) {
  remove_pending_ = false;
  if (node_ != NodeState::exists) {
    if (node_ != NodeState::deleting) release_done(out);
    return;
  }
  node_ = NodeState::deleting;
  pending_marker_ = with_marker;
  remove_tag_ = next_tag();
  MachineCommand c = request(Cmd::remove, remove_tag_, name_);
  c.with_marker = with_marker;
  out.push_back(std::move(c));
}

void LockMachine::on_removed(const MachineEvent& ev, Commands& out) {
  if (ev.tag != 0 && ev.tag == barrier_tag_) {
    barrier_tag_ = 0;
    barrier_done_ = ev.rc != Rc::connection_loss;  // the write ran (as a delete of nothing)
    return;
  }
  if (auto it = extra_tags_.find(ev.tag); it != extra_tags_.end()) {
    const auto name = it->second;
    extra_tags_.erase(it);
    if (ev.rc == Rc::connection_loss) return;  // stays in extras_: resent on reconnect
    std::erase(extras_, name);
    return;
  }
  if (ev.tag == 0 || ev.tag != remove_tag_) return;
  remove_tag_ = 0;
  if (ev.rc == Rc::connection_loss) {
    node_ = NodeState::exists;  // maybe; resent once the same session is back
    if (connected_) remove_own(pending_marker_, out);
    else remove_pending_ = true;
    return;
  }
  if (ev.rc == Rc::error && pending_marker_) {
    node_ = NodeState::exists;
    remove_own(false, out);  // the marker's half failed (say, no access): delete alone
    return;
  }
  node_ = NodeState::gone;  // ok, no_node; or an error we cannot act on
  release_done(out);
}

void LockMachine::release_done(Commands& out) {
  if (phase_ == Phase::releasing) {
    phase_ = Phase::released;
    out.push_back(MachineCommand{Cmd::released});
  } else if (phase_ == Phase::ending) {
    phase_ = Phase::released;  // the lease's `released` was reported when it was retained
  }
}

void LockMachine::remove_extra(const std::string& name, Commands& out) {
  if (std::find(extras_.begin(), extras_.end(), name) == extras_.end()) extras_.push_back(name);
  resend_extra(name, out);
}

void LockMachine::resend_extra(const std::string& name, Commands& out) {
  const auto tag = next_tag();
  extra_tags_[tag] = name;
  out.push_back(request(Cmd::remove_extra, tag, name));
}

// After an attempt ends with a create whose answer was lost: list, and delete
// every node carrying our GUID that we do not already delete. A write goes
// first — the delete of a name no one creates — so that a lost create still
// in the server's pipeline is applied before the listing runs: a read may be
// answered ahead of a write forwarded earlier, a later write may not.
void LockMachine::sweep(Commands& out) {
  sweep_pending_ = true;
  if (!connected_ || list_tag_ != 0) return;
  barrier_tag_ = next_tag();
  barrier_done_ = false;
  out.push_back(request(Cmd::remove_extra, barrier_tag_, "zklock-sweep-barrier-" + cfg_.guid));
  list_tag_ = next_tag();
  out.push_back(request(Cmd::list, list_tag_));
}

void LockMachine::on_sweep(const MachineEvent& ev, const Listing& listing, Commands& out) {
  if (ev.rc == Rc::connection_loss || !barrier_done_) {  // proves nothing: again once connected
    sweep(out);
    return;
  }
  sweep_pending_ = false;
  if (node_ == NodeState::unknown) node_ = NodeState::none;  // found below, or it never ran
  if (ev.rc != Rc::ok) return;                                 // no_node: the lock path is gone, so is ours
  for (const auto& e : listing.nodes) {
    if (!ours(e.node.guid)) continue;
    if (e.node.name == name_ && (node_ == NodeState::exists || node_ == NodeState::deleting)) continue;
    remove_extra(e.node.name, out);
  }
}

}  // namespace zklock::detail
