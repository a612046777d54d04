// The lock machine's core: start, the dispatch of each event, and the outcomes it reports.
//
// The recipe's steps live in three more files: up to the grant (create, list,
// order, the nearest blocker, the hand-off) in lock_machine_acquire.cpp;
// after it (holding, losing, releasing) and cleanup in
// lock_machine_hold.cpp; retained leases in lock_machine_retain.cpp. Each
// step is one event handler; docs/design.md explains why each is sound,
// comments say which invariant a step relies on.
#include <algorithm>
#include <utility>

#include "lock_machine.hpp"

namespace zklock::detail {
namespace {

using Kind = MachineEvent::Kind;
using Req = MachineRequest::Kind;
using Out = MachineOutcome::Kind;

}  // namespace

bool MachineEvent::is_answer() const {
  switch (kind) {
    case Kind::created: case Kind::parents_made: case Kind::listed: case Kind::stats_read:
    case Kind::blocker_checked: case Kind::marker_read: case Kind::own_checked: case Kind::record_read:
    case Kind::removed: case Kind::blocker_probed:
      return true;
    case Kind::blocker_deleted: case Kind::own_deleted: case Kind::own_changed: case Kind::children_changed:
    case Kind::disconnected: case Kind::reconnected: case Kind::expired: case Kind::validity_expired:
    case Kind::validity_proven: case Kind::watchdog: case Kind::cancel: case Kind::release: case Kind::retake:
    case Kind::retain_over:
      return false;
  }
  return false;  // not reached: every kind is named above (a new one is a -Wswitch error)
}

// Listings arm the children watch while no other node has been
// seen, when the lock is expected to be free (this client's previous
// acquisition of it found it so, or, retaining, nothing is known): that
// watch then stands in for the watch on our node (invariant 6), and tells a
// retained node about a waiter (invariant 5). Not for a lock expected to be
// contended: a waiter's watch would only bring a notification at the next
// change, to every waiter (a herd of notifications). Safety never depends
// on it (the simulator gives each machine either history).
LockMachine::LockMachine(MachineConfig config) : cfg_(std::move(config)) {
  watch_listings_ = cfg_.history == LockHistory::free || (cfg_.retain && cfg_.history == LockHistory::unknown);
}

bool LockMachine::finished() const {
  const bool terminal = phase_ == Phase::failed || phase_ == Phase::released;
  const bool no_node = own_.state == NodeState::none || own_.state == NodeState::gone;
  return terminal && no_node && !duties_.has(Duty::sweep) && round_.list_tag == 0 && duties_.extras.empty();
}

LockMachine::Commands LockMachine::start() {
  Commands out;
  phase_ = Phase::acquiring;
  send_create(out);
  return out;
}

// The create and the listing go out back to back: the listing runs after the
// create in session order, so it already holds our node (found by GUID) and
// every node created before it. An uncontended acquire is one round trip.
void LockMachine::send_create(Commands& out) {
  own_.state = NodeState::creating;
  create_tag_ = next_tag();
  send(out, Req::create, create_tag_, guid_for(creates_++));
  relist(out);
}

// Every create gets a GUID of its own, so no two nodes ever share a name: at
// a saturated counter a re-create with the same GUID would get the same name
// as a node it may have left behind, and a name seen in a listing, watched or
// named by the marker must mean one node. The first 24 digits are the
// attempt's (random); the last 8 count its creates.
std::string LockMachine::guid_for(std::uint32_t n) const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string g = cfg_.guid.substr(0, 24);
  for (int shift = 28; shift >= 0; shift -= 4) g += kHex[(n >> shift) & 0xf];
  return g;
}

bool LockMachine::ours(std::string_view guid) const {
  return guid.size() == 32 && guid.substr(0, 24) == std::string_view(cfg_.guid).substr(0, 24);
}

void LockMachine::relist(Commands& out) {
  round_.abandon();  // answers to the old round are stale
  doubted_ = {};     // a watch kept across a listing is the watchdog's case alone (on_watchdog)
  if (doubt_ == Doubt::open && barrier_tag_ == 0) {
    // A create's answer was lost: settle it now, while this client's other
    // attempts resync too (their listings batch into one), not with a
    // listing of its own at the end (sweep). The barrier is a write, so
    // every lost create of ours has run before it; the listing behind it
    // then shows each one (evaluate deletes all but the earliest).
    barrier_tag_ = next_tag();
    send(out, Req::remove_extra, barrier_tag_, "zklock-sweep-barrier-" + cfg_.guid);
  }
  round_.list_tag = next_tag();
  if (!watch_listings_ || others_seen_) {
    send(out, Req::list, round_.list_tag);  // batched by the shell; no watch
    return;
  }
  // The lock looks free: the listing also arms the children watch, which
  // covers our node (invariant 6) and tells a retained node about a waiter
  // (invariant 5); the latest one counts. Once another node is seen the
  // listings go without it: we wait (our node gets its own watch), will
  // not retain, and a waiter's watch is a notification for nothing.
  children_ = {Watch::sent, round_.list_tag};
  send(out, Req::list_watch, round_.list_tag);
}

// Our node has no watch of its own and the children watch cannot stand in
// for it (none set, or we are not alone and will wait): watch it now (6).
void LockMachine::cover_own(Commands& out) {
  if (own_.covered && (children_.tag == 0 || others_seen_) && own_.state == NodeState::exists &&
      (acquiring() || granted())) {
    watch_own(out);
  }
}

// A step's outcome is unknown (connection loss): list again, now if the
// connection is up, else when the same session is back.
void LockMachine::transient(Commands& out) {
  round_.abandon();
  if (link_ == Link::up) relist(out);
  else duties_.add(Duty::relist);
}

LockMachine::Commands LockMachine::step(const MachineEvent& ev) {
  Commands out;
  const auto is = [&](std::uint64_t& tag) {  // the answer we wait for; consumed
    if (ev.tag == 0 || ev.tag != tag) return false;
    tag = 0;
    return true;
  };
  // Any answer saying the session is over ends it, like the session event.
  if (ev.rc == Rc::session_expired && ev.is_answer()) {
    session_over(out);
    return out;
  }
  switch (ev.kind) {
    case Kind::created:
      if (is(create_tag_)) on_created(ev, out);
      break;
    case Kind::parents_made:
      if (!is(round_.parents_tag) || !acquiring()) break;
      if (ev.rc == Rc::error) {
        fail(ev.errc, "creating lock path " + cfg_.lock_path + ": " + ev.detail, out);
      } else if (ev.rc == Rc::connection_loss) {
        own_.state = NodeState::none;
        transient(out);  // the listing will not find us: create again
      } else {
        send_create(out);
      }
      break;
    case Kind::listed: {
      if (!is(round_.list_tag)) break;
      const auto listing = ev.listing ? ev.listing : parse_listing(ev.children);
      note_listing(ev, *listing);
      cover_own(out);  // (6): unless the watch is armed and we may be alone
      on_listed(ev, listing, out);
      break;
    }
    case Kind::own_changed:
      // Someone else wrote our node's data (zklock never does): the
      // deletion watch is spent. Watch again (invariant 6).
      if (is(own_.watch_tag) && own_.state == NodeState::exists) watch_own(out);
      break;
    case Kind::children_changed:
      on_children_changed(ev, out);
      break;
    case Kind::stats_read:
      if (!is(round_.stats_tag) || !acquiring()) break;
      if (ev.stats.size() < round_.stats_names.size()) transient(out);  // a short answer: the reads' outcome is unknown
      else if (round_.stats_for == StatsFor::order) on_order_stats(ev, out);
      else on_candidates(ev, out);
      break;
    case Kind::blocker_checked:
      // The doubted watch was not set after all: the watchdog's listing must not keep it.
      if (ev.tag != 0 && ev.tag == doubted_.watch_tag && ev.rc != Rc::ok) doubted_.watch_tag = 0;
      if (ev.tag != round_.blocker_tag || !acquiring()) break;
      if (ev.rc == Rc::ok) break;  // watch set; wait
      round_.blocker_tag = 0;
      if (ev.rc == Rc::no_node) on_blocker_gone(out);
      else if (ev.rc == Rc::connection_loss) transient(out);
      else fail(ev.errc, "watching a node of " + cfg_.lock_path + ": " + ev.detail, out);
      break;
    case Kind::blocker_deleted:
      // The doubted watch fired while the watchdog's listing was out: spent.
      if (ev.tag != 0 && ev.tag == doubted_.watch_tag) doubted_.watch_tag = 0;
      if (is(round_.blocker_tag) && acquiring()) on_blocker_gone(out);
      break;
    case Kind::watchdog:
      if (acquiring() && link_ == Link::up && round_.blocker_tag != 0) on_watchdog(out);
      break;
    case Kind::blocker_probed:
      if (is(round_.probe_tag) && acquiring()) on_probed(ev, out);
      break;
    case Kind::marker_read:
      if (is(round_.marker_tag) && acquiring()) on_marker(ev, out);
      break;
    case Kind::own_checked:
      if (ev.tag != own_.watch_tag) break;
      if (ev.rc == Rc::no_node) on_own_gone(out);
      else if (ev.rc == Rc::connection_loss) duties_.add(Duty::watch_own);  // re-armed on reconnect
      break;
    case Kind::own_deleted:
      if (is(own_.watch_tag)) on_own_gone(out);
      break;
    case Kind::record_read:
      if (is(record_tag_)) on_record(ev, out);
      break;
    case Kind::removed:
      on_removed(ev, out);
      break;
    case Kind::disconnected:
    case Kind::reconnected:
    case Kind::expired:
    case Kind::validity_expired:
      on_session(ev, out);
      break;
    case Kind::validity_proven:
      break;  // the hand-out below decides
    case Kind::cancel:
      if (acquiring()) fail(ev.errc, ev.detail, out);
      else withdraw(ev.errc, ev.detail + " (granted, but the session's validity could not be proven in time)", out);
      break;
    case Kind::release:
      on_release(ev, out);
      break;
    case Kind::retake:
      on_retake(ev, out);
      break;
    case Kind::retain_over:
      if (phase_ == Phase::retained) end_retention(out);
      break;
  }
  // Invariant (9): a grant waits for a step whose clock says the bound covers it.
  if (phase_ == Phase::proving && (ev.within_bound || ev.no_bound) && own_.state == NodeState::exists) hand_out(out);
  return out;
}

// What a listing of the acquisition says about the children watch and about
// other nodes.
void LockMachine::note_listing(const MachineEvent& ev, const Listing& listing) {
  const bool others = ev.rc == Rc::ok && std::any_of(listing.nodes.begin(), listing.nodes.end(),
                                                     [&](const Entry& e) { return !ours(e.node.guid); });
  if (others) {
    others_seen_ = true;
    if (children_.state == Watch::quiet) children_.state = Watch::busy;
  }
  if (ev.tag == children_.tag) {
    if (ev.rc != Rc::ok) children_ = {};  // no watch was set
    else children_.state = others ? Watch::busy : Watch::quiet;
  }
  // Retaining only: their queues are short, and only a re-take asks.
  if (cfg_.retain && ev.rc == Rc::ok && !own_.name.empty() &&
      std::any_of(listing.nodes.begin(), listing.nodes.end(), [&](const Entry& e) { return e.node.name == own_.name; })) {
    ++confirmations_;
  }
}

// An answer said the session is over: as the session event would.
void LockMachine::session_over(Commands& out) {
  MachineEvent over{Kind::expired};
  over.epoch = cfg_.epoch;
  on_session(over, out);
}

// Our node passed the queue (or a re-take is local); step() hands it out
// once the bound covers it (invariant 9).
void LockMachine::grant() { phase_ = Phase::proving; }

// Invariant (8): each grant of our node, re-takes included, is a lease of
// its own, numbered here.
void LockMachine::hand_out(Commands& out) {
  phase_ = Phase::held;
  MachineOutcome c{Out::granted};
  c.token = own_.czxid;
  c.ordinal = leases_++;
  report(out, std::move(c));
}

// Invariant (9): a grant never handed out ends. The caller gets `errc`; the
// node goes, now or once the same session is back, without the hand-off
// marker (invariant 3: no lease was handed out; a waiter lists again).
void LockMachine::withdraw(Errc errc, std::string message, Commands& out) {
  if (phase_ != Phase::proving) return;
  end_failed(errc, std::move(message), out);
  if (doubt_ != Doubt::none) sweep(out);
  if (own_.state != NodeState::exists) return;
  if (link_ == Link::up) remove_own(Duty::remove, out);
  else duties_.add(Duty::remove);
}

// The attempt's one `failed` outcome (invariant 1); its round is over.
void LockMachine::end_failed(Errc errc, std::string message, Commands& out) {
  phase_ = Phase::failed;
  round_.abandon();
  duties_.drop(Duty::relist);
  MachineOutcome c{Out::failed};
  c.errc = errc;
  c.message = std::move(message);
  report(out, std::move(c));
}

void LockMachine::fail(Errc errc, std::string message, Commands& out) {
  if (!acquiring()) return;
  end_failed(errc, std::move(message), out);
  // Clean up: our node (no marker: it was never granted), or a create whose
  // outcome is unknown; a create still in flight is deleted when answered.
  if (own_.state == NodeState::exists) remove_own(Duty::remove, out);
  if (own_.state == NodeState::unknown || doubt_ != Doubt::none) sweep(out);
}

void LockMachine::send(Commands& out, MachineRequest::Kind kind, std::uint64_t tag, std::string name) {
  MachineRequest c{kind};
  c.tag = tag;
  c.name = std::move(name);
  out.requests.push_back(std::move(c));
}

void LockMachine::notice(Commands& out, std::string message) {
  MachineOutcome n{Out::notice};
  n.message = std::move(message);
  report(out, std::move(n));
}

}  // namespace zklock::detail
