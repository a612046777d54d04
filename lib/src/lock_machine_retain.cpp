// The recipe's retained leases: a waiter seen by the children watch, the re-take, the retention's end.
//
// Invariant (5) of lock_machine.hpp; a release that keeps the node is
// on_release (lock_machine_hold.cpp).
#include <utility>

#include "lock_machine.hpp"

namespace zklock::detail {
namespace {

using Req = MachineRequest::Kind;
using Out = MachineOutcome::Kind;

}  // namespace

// The children of the lock changed since our latest watched listing: a
// waiter queued (or a node went, ours perhaps).
void LockMachine::on_children_changed(const MachineEvent& ev, Commands& out) {
  if (ev.tag == 0 || ev.tag != children_.tag) return;  // an older watch: a later listing covers it
  children_ = {};
  others_seen_ = true;
  if (phase_ == Phase::retained) {
    end_retention(out);  // hand the lock on at once
    return;
  }
  // Held or waiting with no watch of its own on our node: is it still there
  // (6)? Otherwise acquiring: the listings decide; retaking: the re-take's listing.
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
// re-arming on every re-take would grow that list without bound on a lock
// re-taken for hours with nobody else queueing (and fire all of it at the
// first waiter). If the armed watch fires before this listing is answered,
// the notification comes first (one connection, in order) and clears it: the
// re-take may still grant, but the release then does not retain.
void LockMachine::on_retake(Commands& out) {
  if (phase_ != Phase::retained) return;
  phase_ = Phase::retaking;
  retake_ = Retake{next_tag(), Rc::connection_loss, 0};
  MachineRequest t{Req::touch};
  t.tag = retake_->touch_tag;
  t.name = own_.name;
  t.version = own_.version;
  out.requests.push_back(std::move(t));
  round_.list_tag = next_tag();
  if (children_.armed()) {
    send(out, Req::list, round_.list_tag);
    return;
  }
  children_ = {Watch::sent, round_.list_tag};
  send(out, Req::list_watch, round_.list_tag);
}

void LockMachine::on_retake_listed(const MachineEvent& ev, const Listing& listing, Commands& out) {
  // (A setData unanswered before its listing cannot happen in session
  // order: its outcome counts as unknown.)
  const Retake r = *std::exchange(retake_, std::nullopt);
  const Rc touch_rc = r.touch_tag != 0 ? Rc::connection_loss : r.touch_rc;
  if (ev.rc != Rc::ok) {
    children_ = {};  // a watch this listing would have set is not known to be set
  } else if (ev.tag == children_.tag) {
    children_.state = Watch::busy;  // armed; quiet only if the re-take grants
  }
  bool alone = ev.rc == Rc::ok, listed_self = false;
  for (const auto& e : listing.nodes) {  // foreign children are not part of the queue
    if (e.node.name == own_.name) listed_self = true;
    else alone = false;
  }
  if (touch_rc == Rc::ok && alone && listed_self) {
    if (children_.armed()) children_.state = Watch::quiet;
    grant(r.mzxid, out);  // invariant (5): the setData's zxid is the token
    return;
  }
  if (children_.armed()) children_.state = Watch::busy;
  void_retake(touch_rc, touch_rc == Rc::no_node ? "our retained node is gone (session expired or revoked)"
                        : touch_rc != Rc::ok    ? "the re-take's setData failed or its outcome is unknown"
                        : !alone                ? "another node is queued: queueing behind it"
                                                : "our node is not listed",
              out);
}

// The re-take does not grant: release for real (the remove goes out before
// the caller's new create, so a waiter found by the listing goes first).
void LockMachine::void_retake(Rc touch_rc, std::string why, Commands& out) {
  if (touch_rc == Rc::no_node && own_.state == NodeState::exists) {
    own_.state = NodeState::gone;
    own_.watch_tag = 0;
    notice(out, "retained node " + own_.name + " of " + cfg_.lock_path + " was deleted while idle");
  }
  phase_ = Phase::ending;
  remove_own(Duty::remove_marked, out);
  MachineOutcome c{Out::retake_void};
  c.message = std::move(why);
  report(out, std::move(c));
}

void LockMachine::end_retention(Commands& out) {
  phase_ = Phase::ending;
  // A granted node: the marker if someone may wait (invariant 3).
  remove_own(nobody_queued() ? Duty::remove : Duty::remove_marked, out);
}

}  // namespace zklock::detail
