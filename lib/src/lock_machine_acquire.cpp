// The recipe up to the grant: create, list, order the queue, watch the nearest blocker, hand-off.
//
//   create → list → (ordered) → granted | watch the nearest blocker
//          → hand-off → granted
// The dispatch is lock_machine.cpp; after the grant: lock_machine_hold.cpp.
#include <algorithm>
#include <utility>

#include "lock_machine.hpp"
#include "model/queue_order.hpp"

namespace zklock::detail {
namespace {

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
      if (children_tag_ != 0 && children_tag_ == list_tag_) {
        // The watched listing behind the create (session order: it shows
        // our node) covers it until it fires (invariant 6).
        own_watch_off_ = true;
      } else {
        watch_own(out);
      }
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
      barrier_done_ = false;  // a barrier that ran before this create proves nothing about it
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
  listing_settled_ = barrier_done_;  // its answer follows the barrier's on one connection
  copy_.reset();
  const auto mine = listing_->by_attempt.find(cfg_.guid.substr(0, 24));
  if (mine == listing_->by_attempt.end()) {
    // This listing ran after our create (and after every earlier attempt of it).
    if (listing_settled_) ever_uncertain_ = false;  // no lost create of ours ran, and none will
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
// REQUIRES one stat per name read (step() checks).
void LockMachine::on_order_stats(const MachineEvent& ev, Commands& out) {
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
  // Every lost create of ours had run before a settled listing did: it shows
  // each node of ours, and the extras are being deleted above. Nothing is
  // left to sweep when the attempt ends.
  if (listing_settled_) ever_uncertain_ = false;
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
// REQUIRES one stat per name read (step() checks).
void LockMachine::on_candidates(const MachineEvent& ev, Commands& out) {
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

}  // namespace zklock::detail
