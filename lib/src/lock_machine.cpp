// The recipe, up to the grant: create → list → (ordered) → granted | watch
// the nearest blocker → hand-off → granted. After the grant (holding,
// losing, releasing, retaining) and cleanup: lock_machine_hold.cpp. Each
// step is one event handler; docs/design.md explains why each is sound,
// comments say which invariant a step relies on.
#include "lock_machine.hpp"

#include <algorithm>
#include <utility>

#include "model/queue_order.hpp"

namespace zklock::detail {
namespace {

using Kind = MachineEvent::Kind;
using Cmd = MachineCommand::Kind;

model::OrderKey key_of(const LockNodeName& n, std::int64_t czxid) { return {n.sequence, czxid, n.name}; }

}  // namespace

std::shared_ptr<const Listing> parse_listing(const std::vector<std::string>& children) {
  auto l = std::make_shared<Listing>();
  l->nodes.reserve(children.size());
  for (const auto& child : children) {
    auto parsed = parse_lock_node_name(child);
    if (parsed) l->nodes.push_back(QueueEntry{std::move(*parsed), 0});  // else foreign: not queued
  }
  l->exact = model::sort_by_creation(l->nodes, [](const QueueEntry& e) { return key_of(e.node, e.czxid); }) &&
             model::czxids_needed(l->nodes, [](const QueueEntry& e) { return key_of(e.node, e.czxid); }).empty();
  for (std::size_t i = 0; i < l->nodes.size(); ++i) l->by_attempt[l->nodes[i].node.guid.substr(0, 24)].push_back(i);
  return l;
}

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
  list_tag_ = next_tag();
  if (!retaining()) {
    out.push_back(request(Cmd::list, list_tag_));
    return;
  }
  // Retain mode: the listing also arms the children watch that tells a
  // retained node about a waiter (invariant 5); the latest one counts.
  children_tag_ = list_tag_;
  waiter_known_ = true;  // until its answer shows no other node
  out.push_back(request(Cmd::list_watch, list_tag_));
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
      if (retaining() && ev.tag == children_tag_) {
        if (ev.rc != Rc::ok) children_tag_ = 0;  // no watch was set
        waiter_known_ = ev.rc != Rc::ok || std::any_of(listing->nodes.begin(), listing->nodes.end(),
                                                       [&](const Entry& e) { return !ours(e.node.guid); });
      }
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
      if (retaining()) own_watch_off_ = true;
      else if (node_ == NodeState::exists) watch_own(out);
      break;
    case Kind::children_changed:
      on_children_changed(ev, out);
      break;
    case Kind::stats_read:
      if (!is(stats_tag_) || !acquiring()) break;
      if (stats_for_ == StatsFor::order) on_order_stats(ev, out);
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

void LockMachine::on_created(const MachineEvent& ev, Commands& out) {
  switch (ev.rc) {
    case Rc::ok:
      node_ = NodeState::exists;
      name_ = ev.name;
      czxid_ = ev.czxid;
      if (phase_ == Phase::failed) {  // abandoned while the create was in flight
        remove_own(false, out);
        return;
      }
      watch_own(out);
      return;  // the listing behind the create evaluates
    case Rc::no_node:  // the lock path is missing (or an emptied container was reaped)
      node_ = NodeState::none;
      if (!acquiring()) return;
      list_tag_ = 0;  // the listing behind this create is void
      if (++parent_attempts_ > 20) {
        fail(Errc::no_node, "cannot create lock path " + cfg_.lock_path + " (it keeps disappearing)", out);
        return;
      }
      parents_tag_ = next_tag();
      out.push_back(request(Cmd::make_parents, parents_tag_));
      return;
    case Rc::connection_loss:
      // The create may have run. A listing finds it by GUID.
      node_ = NodeState::unknown;
      ever_uncertain_ = true;
      if (acquiring()) transient(out);
      else sweep(out);
      return;
    default:
      node_ = NodeState::none;
      if (acquiring()) fail(ev.errc, "creating a lock node under " + cfg_.lock_path + ": " + ev.detail, out);
      return;
  }
}

void LockMachine::on_listed(const MachineEvent& ev, std::shared_ptr<const Listing> listing, Commands& out) {
  if (!acquiring()) {
    on_sweep(ev, *listing, out);
    return;
  }
  if (ev.rc == Rc::connection_loss) {
    transient(out);
    return;
  }
  if (ev.rc == Rc::error) {
    fail(ev.errc, "listing " + cfg_.lock_path + ": " + ev.detail, out);
    return;
  }
  listing_ = std::move(listing);
  copy_.reset();
  const auto mine = listing_->by_attempt.find(cfg_.guid.substr(0, 24));
  if (mine == listing_->by_attempt.end()) {
    // This listing ran after our create (and after every earlier attempt of it).
    if (node_ == NodeState::exists) {
      on_own_gone(out);  // deleted by someone: expired or revoked
    } else if (node_ == NodeState::creating) {
      // The create failed; its answer (before this one) already said how.
    } else {
      send_create(out);  // the lost create never ran: create again
    }
    return;
  }
  std::vector<std::string> needed;
  if (listing_->exact) {
    // Suffixes give the order: shared as it is. Only a node of ours found
    // by the listing (a create whose answer was lost) needs its czxid: the token.
    const auto& first = listing_->nodes[mine->second.front()].node;
    if (node_ != NodeState::exists || first.name != name_) needed.push_back(first.name);
  } else {
    // The czxid of every node orders this queue: read each one we do not
    // know (only our own node's is known; czxids are not remembered from
    // earlier listings, so an order never rests on a stale read).
    copy_ = std::make_shared<std::vector<Entry>>(listing_->nodes);
    for (auto& e : *copy_) {
      if (node_ == NodeState::exists && e.node.name == name_) e.czxid = czxid_;
      if (e.czxid == 0) needed.push_back(e.node.name);
    }
  }
  if (needed.empty()) {
    evaluate(out);
    return;
  }
  read_stats(StatsFor::order, std::move(needed), out);
}

// Only ZNONODE means gone. Any other failure resyncs or fails, never grants.
void LockMachine::on_order_stats(const MachineEvent& ev, Commands& out) {
  if (ev.stats.size() < stats_names_.size()) {
    transient(out);
    return;
  }
  for (std::size_t i = 0; i < stats_names_.size(); ++i) {
    const auto& st = ev.stats[i];
    switch (st.rc) {
      case Rc::ok:
      case Rc::no_node: break;
      case Rc::connection_loss: transient(out); return;
      case Rc::session_expired: session_over(out); return;
      default: fail(Errc::system_error, "reading the order of " + cfg_.lock_path, out); return;
    }
    if (!copy_) {  // an exact listing: the one node of ours it found
      if (st.rc == Rc::no_node) {
        relist(out);  // gone since the listing: look again
        return;
      }
      adopt_czxid_ = st.czxid;
      continue;
    }
    auto it = std::find_if(copy_->begin(), copy_->end(), [&](const Entry& e) { return e.node.name == stats_names_[i]; });
    if (it == copy_->end()) continue;
    if (st.rc == Rc::ok) it->czxid = st.czxid;
    else copy_->erase(it);
  }
  evaluate(out);
}

// REQUIRES: queue() holds a listing issued after our create, in exact
// creation order. Invariant (4).
void LockMachine::evaluate(Commands& out) {
  // Our earliest node is the one that queues; later ones (a lost create
  // that ran after all) are deleted.
  std::optional<std::size_t> mine;
  std::int64_t czxid = 0;
  if (copy_) {
    model::sort_by_creation(*copy_, [](const Entry& e) { return key_of(e.node, e.czxid); });
    for (std::size_t i = 0; i < copy_->size();) {
      if (!ours((*copy_)[i].node.guid)) {
        ++i;
      } else if (!mine) {
        mine = i++;
      } else {
        remove_extra((*copy_)[i].node.name, out);
        copy_->erase(copy_->begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    if (mine) czxid = (*copy_)[*mine].czxid;
  } else {
    const auto& idx = listing_->by_attempt.at(cfg_.guid.substr(0, 24));
    mine = idx.front();  // later ones stay in the shared listing, behind us
    for (std::size_t k = 1; k < idx.size(); ++k) remove_extra(listing_->nodes[idx[k]].node.name, out);
    czxid = listing_->nodes[*mine].node.name == name_ && node_ == NodeState::exists ? czxid_ : adopt_czxid_;
  }
  if (!mine) {  // every node of ours vanished between listing and stats
    if (node_ == NodeState::exists) on_own_gone(out);
    else send_create(out);
    return;
  }
  self_ = *mine;
  const auto& me = queue()[self_].node;
  if (me.name != name_ || node_ != NodeState::exists) {  // adopt it (a lost create's answer, or an earlier duplicate)
    if (node_ == NodeState::exists && !name_.empty() && me.name != name_) remove_extra(name_, out);
    name_ = me.name;
    czxid_ = czxid;
    node_ = NodeState::exists;
    watch_own(out);
  }
  const auto blocker = model::nearest_blocker(queue(), self_, [](const Entry& e) { return e.node.mode; });
  if (!blocker) {
    grant(out);
    return;
  }
  watch_blocker(*blocker, out);
}

// The hand-off. The nodes ahead of us only ever shrink: our listing ran
// after our create, so it held every node created before ours, and nodes
// created later order after ours. If the blocker was the only node of that
// listing that could block us, its deletion leaves nothing ahead that blocks
// — released, abandoned or revoked alike — and no read is needed.
void LockMachine::on_blocker_gone(Commands& out) {
  const auto waiter = queue()[self_].node.mode;
  bool only = true;
  for (std::size_t j = 0; j < self_ && only; ++j) {
    only = j == blocker_ || !model::blocks(waiter, queue()[j].node.mode);
  }
  if (only) {
    grant(out);
    return;
  }
  marker_tag_ = next_tag();
  out.push_back(request(Cmd::read_marker, marker_tag_));
}

// A marker naming the blocker proves it was granted (invariant 3): when it
// was, nothing that blocks an exclusive node was ahead of it, and nothing can
// be created ahead of us later. A shared blocker proves nothing about other
// readers ahead, so those are checked. Any other marker: list again.
void LockMachine::on_marker(const MachineEvent& ev, Commands& out) {
  if (ev.rc == Rc::connection_loss) {
    transient(out);
    return;
  }
  const auto& blocker = queue()[blocker_].node;
  if (ev.rc != Rc::ok || ev.data != blocker.name) {
    relist(out);
    return;
  }
  if (blocker.mode == Mode::exclusive) {
    grant(out);
    return;
  }
  std::vector<std::string> names;
  for (std::size_t j = 0; j < self_; ++j) {
    if (j != blocker_ && model::blocks(queue()[self_].node.mode, queue()[j].node.mode)) {
      names.push_back(queue()[j].node.name);
    }
  }
  if (names.empty()) {
    grant(out);
    return;
  }
  read_stats(StatsFor::candidates, std::move(names), out);
}

// The nearest earlier node that still exists and blocks us is watched next.
void LockMachine::on_candidates(const MachineEvent& ev, Commands& out) {
  if (ev.stats.size() < stats_names_.size()) {
    transient(out);
    return;
  }
  std::optional<std::size_t> nearest;
  for (std::size_t i = 0; i < stats_names_.size(); ++i) {
    const auto rc = ev.stats[i].rc;
    if (rc == Rc::connection_loss) {
      transient(out);
      return;
    }
    if (rc == Rc::no_node) continue;
    for (std::size_t j = 0; j < self_; ++j) {
      if (queue()[j].node.name == stats_names_[i] && (!nearest || j > *nearest)) nearest = j;
    }
  }
  if (!nearest) {
    grant(out);
    return;
  }
  watch_blocker(*nearest, out);
}

// One exists watch, on one node of queue(): no herd.
void LockMachine::watch_blocker(std::size_t index, Commands& out) {
  blocker_ = index;
  blocker_tag_ = next_tag();
  out.push_back(request(Cmd::watch_blocker, blocker_tag_, queue()[blocker_].node.name));
}

// Pipelined exists (no watch) on `names`; the answer goes to `purpose`.
void LockMachine::read_stats(StatsFor purpose, std::vector<std::string> names, Commands& out) {
  stats_for_ = purpose;
  stats_names_ = std::move(names);
  stats_tag_ = next_tag();
  MachineCommand c = request(Cmd::read_stats, stats_tag_);
  c.names = stats_names_;
  out.push_back(std::move(c));
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
