// The recipe's retained leases: a waiter seen by the children watch, the re-take, the retention's end.
//
// Invariant (5) of lock_machine.hpp; a release that keeps the node is
// on_release (lock_machine_hold.cpp).
#include <utility>

#include "lock_machine.hpp"

namespace zklock::detail {
namespace {

using Out = MachineOutcome::Kind;
using Req = MachineRequest::Kind;

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
  // (6)? Otherwise acquiring: the listings decide.
  cover_own(out);
}

// The re-take, local (invariant 5). Our node has existed since its create,
// and nothing created later is ahead of it: no other holder can have been
// granted while it exists. Connected and inside the validity bound, the
// session is not over, so an expiry has not taken the node; the quiet
// watch says no child changed since the listing that set it, so nobody
// queued and nobody deleted it (counted only while a listing confirmed the
// node within the watchdog's period, invariant 7: the notification may be
// lost; the event says) — unless that news is on its way right now
// (a revocation in flight), which is the window of any holder whose node
// was just deleted: the notification, due any moment, reports the loss
// (cover_own), and the fencing token (the same czxid with the next lease
// ordinal: above every earlier lease of the node, below every later node's)
// refuses the earlier leases' writes once this lease has written, and this
// lease's once the successor has.
void LockMachine::on_retake(const MachineEvent& ev, Commands& out) {
  if (phase_ != Phase::retained) return;
  if (ev.cancelled) {
    void_retake("the request was cancelled before it began", out);  // it fails as a normal acquisition
  } else if (link_ != Link::up) {
    void_retake("disconnected: the retained node cannot be trusted until the session is back", out);
  } else if (!ev.within_bound) {
    void_retake("the session's validity bound has lapsed: the node may be gone", out);
  } else if (!ev.confirmed) {
    void_retake("no listing has confirmed the node for the waiting watchdog's period: its deletion may have gone "
                "unnoticed", out);
  } else if (!nobody_queued() || own_.state != NodeState::exists || loss_) {
    void_retake("something changed under the lock since the node was retained", out);
  } else {
    grant();  // the same node, the next lease ordinal (invariant 8)
  }
}

// Invariant (7) for a retained node: a re-take counts on the quiet children
// watch only within the watchdog's period of a listing that showed the node,
// so a node in use is listed before that runs out (the shell times it):
// one read per period, where a stale re-take would cost a release, its
// marker and a fresh acquisition. It sets no watch: the children watch we
// count on stays armed, and each watching call would leave the C client
// one more callback until the children change, which for a lock only we
// take is never.
void LockMachine::confirm_retained(Commands& out) {
  if (link_ != Link::up || confirm_tag_ != 0) return;
  confirm_tag_ = next_tag();
  send(out, Req::list, confirm_tag_);
}

// The node alone in the listing: confirmed (note_listing counted it).
// Anything else — a waiter the watch did not report, our node gone, an
// error — ends the retention; a waiter is handed the lock. A listing lost
// with the connection proves nothing and ends nothing: a re-take past the
// period is void as before.
void LockMachine::on_confirmation(const MachineEvent& ev, const Listing& listing, Commands& out) {
  note_listing(ev, listing);
  cover_own(out);  // re-taken meanwhile and a waiter shown: our node gets its own watch (6)
  if (phase_ != Phase::retained || ev.rc == Rc::connection_loss) return;  // re-taken or ended meanwhile; or no answer
  const bool alone = ev.rc == Rc::ok && listing.nodes.size() == 1 && listing.nodes.front().node.name == own_.name;
  if (!alone) end_retention(out);
}

// The re-take cannot be local: release for real (the remove goes out before
// the caller's new create, so a waiter goes first).
void LockMachine::void_retake(std::string why, Commands& out) {
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
