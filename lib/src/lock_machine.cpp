// The lock machine's core: start, the dispatch of each event, and the outcomes it reports.
//
// The recipe's steps live in three files: up to the grant (create, list,
// order, the nearest blocker, the hand-off) in lock_machine_acquire.cpp;
// after it (holding, losing, releasing, retaining) and cleanup in
// lock_machine_hold.cpp. Each step is one event handler; docs/design.md
// explains why each is sound, comments say which invariant a step relies on.
#include <algorithm>
#include <utility>

#include "lock_machine.hpp"

namespace zklock::detail {
namespace {

using Kind = MachineEvent::Kind;
using Cmd = MachineCommand::Kind;

}  // namespace

LockMachine::LockMachine(MachineConfig config) : cfg_(std::move(config)) {}

bool LockMachine::finished() const {
  const bool terminal = phase_ == Phase::failed || phase_ == Phase::released;
  const bool no_node = node_ == NodeState::none || node_ == NodeState::gone;
  return terminal && no_node && !sweep_pending_ && list_tag_ == 0 && extras_.empty();
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
  node_ = NodeState::creating;
  create_tag_ = next_tag();
  out.push_back(request(Cmd::create, create_tag_, guid_for(creates_++)));
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
  stats_tag_ = blocker_tag_ = marker_tag_ = 0;  // answers to the old round are stale
  if (ever_uncertain_ && !barrier_done_ && barrier_tag_ == 0) {
    // A create's answer was lost: settle it now, while this client's other
    // attempts resync too (their listings batch into one), not with a
    // listing of its own at the end (sweep). The barrier is a write, so
    // every lost create of ours has run before it; the listing behind it
    // then shows each one (evaluate deletes all but the earliest).
    barrier_tag_ = next_tag();
    out.push_back(request(Cmd::remove_extra, barrier_tag_, "zklock-sweep-barrier-" + cfg_.guid));
  }
  list_tag_ = next_tag();
  if (!cfg_.watch_listings || others_seen_) {
    out.push_back(request(Cmd::list, list_tag_));  // batched by the shell; no watch
    return;
  }
  // The lock looks free: the listing also arms the children watch, which
  // covers our node (invariant 6) and tells a retained node about a waiter
  // (invariant 5); the latest one counts. Once another node is seen the
  // listings go without it: we wait (our node gets its exists watch), will
  // not retain, and a waiter's watch is a notification for nothing.
  children_tag_ = list_tag_;
  children_armed_ = false;
  waiter_known_ = true;  // until its answer shows no other node
  out.push_back(request(Cmd::list_watch, list_tag_));
}

// Our node has no exists watch and the children watch cannot stand in for it
// (none armed, or we are not alone and will wait): watch it now (invariant 6).
void LockMachine::cover_own(Commands& out) {
  if (own_watch_off_ && (children_tag_ == 0 || others_seen_) && node_ == NodeState::exists &&
      (acquiring() || phase_ == Phase::held)) {
    watch_own(out);
  }
}

// A step's outcome is unknown (connection loss): list again, now if the
// connection is up, else when the same session is back.
void LockMachine::transient(Commands& out) {
  list_tag_ = stats_tag_ = blocker_tag_ = marker_tag_ = 0;
  if (connected_) {
    relist(out);
  } else {
    resync_pending_ = true;
  }
}

LockMachine::Commands LockMachine::step(const MachineEvent& ev) {
  Commands out;
  const auto is = [&](std::uint64_t& tag) {  // the answer we wait for; consumed
    if (ev.tag == 0 || ev.tag != tag) return false;
    tag = 0;
    return true;
  };
  // Any answer saying the session is over ends it, like the session event.
  if (ev.rc == Rc::session_expired && ev.kind < Kind::disconnected) {
    session_over(out);
    return out;
  }
  switch (ev.kind) {
    case Kind::created:
      if (is(create_tag_)) on_created(ev, out);
      break;
    case Kind::parents_made:
      if (!is(parents_tag_) || !acquiring()) break;
      if (ev.rc == Rc::error) {
        fail(ev.errc, "creating lock path " + cfg_.lock_path + ": " + ev.detail, out);
      } else if (ev.rc == Rc::connection_loss) {
        node_ = NodeState::none;
        transient(out);  // the listing will not find us: create again
      } else {
        send_create(out);
      }
      break;
    case Kind::listed: {
      if (!is(list_tag_)) break;
      const auto listing = ev.listing ? ev.listing : parse_listing(ev.children);
      if (phase_ == Phase::retaking) {
        on_retake_listed(ev, *listing, out);
        break;
      }
      const bool others = ev.rc == Rc::ok && std::any_of(listing->nodes.begin(), listing->nodes.end(),
                                                         [&](const Entry& e) { return !ours(e.node.guid); });
      if (others) others_seen_ = waiter_known_ = true;
      if (ev.tag == children_tag_) {
        if (ev.rc != Rc::ok) children_tag_ = 0;  // no watch was set
        children_armed_ = ev.rc == Rc::ok;
        waiter_known_ = ev.rc != Rc::ok || others;
      }
      cover_own(out);  // (6): unless the watch is armed and we may be alone
      on_listed(ev, listing, out);
      break;
    }
    case Kind::touched:
      if (!is(touch_tag_)) break;
      touch_rc_ = ev.rc;
      if (ev.rc == Rc::ok) {
        version_ = ev.version;
        retake_mzxid_ = ev.mzxid;
      }
      break;
    case Kind::own_changed:
      if (ev.tag == 0 || ev.tag != own_tag_) break;
      own_tag_ = 0;
      // Only we rewrite our node (a re-take's setData). Re-arming would cost
      // a read per re-take; the children watch sees our node's deletion too.
      // The children watch of the re-take's listing covers our node (6).
      own_watch_off_ = true;
      cover_own(out);
      break;
    case Kind::children_changed:
      on_children_changed(ev, out);
      break;
    case Kind::stats_read:
      if (!is(stats_tag_) || !acquiring()) break;
      if (ev.stats.size() < stats_names_.size()) transient(out);  // a short answer: the reads' outcome is unknown
      else if (stats_for_ == StatsFor::order) on_order_stats(ev, out);
      else on_candidates(ev, out);
      break;
    case Kind::blocker_checked:
      if (ev.tag != blocker_tag_ || !acquiring()) break;
      if (ev.rc == Rc::ok) break;  // watch set; wait
      blocker_tag_ = 0;
      if (ev.rc == Rc::no_node) on_blocker_gone(out);
      else if (ev.rc == Rc::connection_loss) transient(out);
      else fail(ev.errc, "watching a node of " + cfg_.lock_path + ": " + ev.detail, out);
      break;
    case Kind::blocker_deleted:
      if (is(blocker_tag_) && acquiring()) on_blocker_gone(out);
      break;
    case Kind::marker_read:
      if (is(marker_tag_) && acquiring()) on_marker(ev, out);
      break;
    case Kind::own_checked:
      if (ev.tag != own_tag_) break;
      if (ev.rc == Rc::no_node) on_own_gone(out);
      else if (ev.rc == Rc::connection_loss) own_watch_pending_ = true;  // re-armed on reconnect
      break;
    case Kind::own_deleted:
      if (is(own_tag_)) on_own_gone(out);
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
    case Kind::cancel:
      if (acquiring()) fail(ev.errc, ev.detail, out);
      break;
    case Kind::release:
      on_release(out);
      break;
    case Kind::retake:
      on_retake(out);
      break;
    case Kind::retain_over:
      if (phase_ == Phase::retained) end_retention(out);
      break;
  }
  return out;
}

// An answer said the session is over: as the session event would.
void LockMachine::session_over(Commands& out) {
  MachineEvent over{Kind::expired};
  over.epoch = cfg_.epoch;
  on_session(over, out);
}

void LockMachine::grant(Commands& out) {
  phase_ = Phase::held;
  MachineCommand c{Cmd::granted};
  c.czxid = czxid_;
  out.push_back(std::move(c));
}

void LockMachine::fail(Errc errc, std::string message, Commands& out) {
  if (!acquiring()) return;
  phase_ = Phase::failed;
  list_tag_ = stats_tag_ = blocker_tag_ = marker_tag_ = parents_tag_ = 0;
  resync_pending_ = false;
  MachineCommand c{Cmd::failed};
  c.errc = errc;
  c.message = std::move(message);
  out.push_back(std::move(c));
  // Clean up: our node (no marker: it was never granted), or a create whose
  // outcome is unknown; a create still in flight is deleted when answered.
  if (node_ == NodeState::exists) remove_own(false, out);
  if (node_ == NodeState::unknown || ever_uncertain_) sweep(out);
}

MachineCommand LockMachine::request(MachineCommand::Kind kind, std::uint64_t tag, std::string name) {
  MachineCommand c{kind};
  c.tag = tag;
  c.name = std::move(name);
  return c;
}

}  // namespace zklock::detail
