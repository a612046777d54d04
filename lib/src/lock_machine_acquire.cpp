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

using Req = MachineRequest::Kind;
using Out = MachineOutcome::Kind;

model::OrderKey key_of(const protocol::LockNodeName& n, std::int64_t czxid) { return {n.sequence, czxid, n.name}; }

}  // namespace

std::shared_ptr<const Listing> parse_listing(const std::vector<std::string>& children) {
  auto l = std::make_shared<Listing>();
  l->nodes.reserve(children.size());
  for (const auto& child : children) {
    auto parsed = protocol::parse_lock_node_name(child);
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
      own_.state = NodeState::exists;
      own_.name = ev.name;
      own_.czxid = ev.czxid;
      if (phase_ == Phase::failed) {  // abandoned while the create was in flight
        remove_own(Duty::remove, out);
        return;
      }
      if (children_.tag != 0 && children_.tag == round_.list_tag) {
        // The watched listing behind the create (session order: it shows
        // our node) covers it until it fires (invariant 6).
        own_.covered = true;
      } else {
        watch_own(out);
      }
      return;  // the listing behind the create evaluates
    case Rc::no_node:  // the lock path is missing (or an emptied container was reaped)
      own_.state = NodeState::none;
      if (!acquiring()) return;
      round_.list_tag = 0;  // the listing behind this create is void
      if (++parent_attempts_ > 20) {
        fail(Errc::no_node, "cannot create lock path " + cfg_.lock_path + " (it keeps disappearing)", out);
        return;
      }
      round_.parents_tag = next_tag();
      send(out, Req::make_parents, round_.parents_tag);
      return;
    case Rc::connection_loss:
      // The create may have run. A listing finds it by GUID.
      own_.state = NodeState::unknown;
      doubt_ = Doubt::open;  // a barrier that ran before this create proves nothing about it
      if (acquiring()) transient(out);
      else sweep(out);
      return;
    case Rc::node_exists:      // a sequential create never collides; if it does, nothing was made
    case Rc::session_expired:  // not reached: step() ends the session before dispatching an answer
    case Rc::error:
      own_.state = NodeState::none;
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
  round_.listing = std::move(listing);
  round_.settled = doubt_ == Doubt::barrier_ran;  // its answer follows the barrier's on one connection
  round_.copy.reset();
  const auto mine = round_.listing->by_attempt.find(cfg_.guid.substr(0, 24));
  if (mine == round_.listing->by_attempt.end()) {
    // This listing ran after our create (and after every earlier attempt of it).
    if (round_.settled) doubt_ = Doubt::none;  // no lost create of ours ran, and none will
    if (own_.state == NodeState::exists) {
      on_own_gone(out);  // deleted by someone: expired or revoked
    } else if (own_.state == NodeState::creating) {
      // The create failed; its answer (before this one) already said how.
    } else {
      send_create(out);  // the lost create never ran: create again
    }
    return;
  }
  std::vector<std::string> needed;
  if (round_.listing->exact) {
    // Suffixes give the order: shared as it is. Only a node of ours found
    // by the listing (a create whose answer was lost) needs its czxid: the token.
    const auto& first = round_.listing->nodes[mine->second.front()].node;
    if (own_.state != NodeState::exists || first.name != own_.name) needed.push_back(first.name);
  } else {
    // The czxid of every node orders this queue: read each one we do not
    // know (only our own node's is known; czxids are not remembered from
    // earlier listings, so an order never rests on a stale read).
    round_.copy = std::make_shared<std::vector<Entry>>(round_.listing->nodes);
    for (auto& e : *round_.copy) {
      if (own_.state == NodeState::exists && e.node.name == own_.name) e.czxid = own_.czxid;
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
  for (std::size_t i = 0; i < round_.stats_names.size(); ++i) {
    const auto& st = ev.stats[i];
    switch (st.rc) {
      case Rc::ok:
      case Rc::no_node: break;
      case Rc::connection_loss: transient(out); return;
      case Rc::session_expired: session_over(out); return;
      case Rc::node_exists:
      case Rc::error: fail(Errc::system_error, "reading the order of " + cfg_.lock_path, out); return;
    }
    if (!round_.copy) {  // an exact listing: the one node of ours it found
      if (st.rc == Rc::no_node) {
        relist(out);  // gone since the listing: look again
        return;
      }
      round_.adopt_czxid = st.czxid;
      continue;
    }
    auto it = std::find_if(round_.copy->begin(), round_.copy->end(), [&](const Entry& e) { return e.node.name == round_.stats_names[i]; });
    if (it == round_.copy->end()) continue;
    if (st.rc == Rc::ok) it->czxid = st.czxid;
    else round_.copy->erase(it);
  }
  evaluate(out);
}

// REQUIRES: round_.queue() holds a listing issued after our create, in exact
// creation order. Invariant (4).
void LockMachine::evaluate(Commands& out) {
  // Our earliest node is the one that queues; later ones (a lost create
  // that ran after all) are deleted.
  std::optional<std::size_t> mine;
  std::int64_t czxid = 0;
  if (round_.copy) {
    model::sort_by_creation(*round_.copy, [](const Entry& e) { return key_of(e.node, e.czxid); });
    for (std::size_t i = 0; i < round_.copy->size();) {
      if (!ours((*round_.copy)[i].node.guid)) {
        ++i;
      } else if (!mine) {
        mine = i++;
      } else {
        remove_extra((*round_.copy)[i].node.name, out);
        round_.copy->erase(round_.copy->begin() + static_cast<std::ptrdiff_t>(i));
      }
    }
    if (mine) czxid = (*round_.copy)[*mine].czxid;
  } else {
    const auto& idx = round_.listing->by_attempt.at(cfg_.guid.substr(0, 24));
    mine = idx.front();  // later ones stay in the shared listing, behind us
    for (std::size_t k = 1; k < idx.size(); ++k) remove_extra(round_.listing->nodes[idx[k]].node.name, out);
    czxid = round_.listing->nodes[*mine].node.name == own_.name && own_.state == NodeState::exists ? own_.czxid : round_.adopt_czxid;
  }
  if (!mine) {  // every node of ours vanished between listing and stats
    if (own_.state == NodeState::exists) on_own_gone(out);
    else send_create(out);
    return;
  }
  // Every lost create of ours had run before a settled listing did: it shows
  // each node of ours, and the extras are being deleted above. Nothing is
  // left to sweep when the attempt ends.
  if (round_.settled) doubt_ = Doubt::none;
  round_.self = *mine;
  const auto& me = round_.queue()[round_.self].node;
  if (me.name != own_.name || own_.state != NodeState::exists) {  // adopt it (a lost create's answer, or an earlier duplicate)
    if (own_.state == NodeState::exists && !own_.name.empty() && me.name != own_.name) remove_extra(own_.name, out);
    own_.name = me.name;
    own_.czxid = czxid;
    own_.state = NodeState::exists;
    watch_own(out);
  }
  const auto blocker = model::nearest_blocker(round_.queue(), round_.self, [](const Entry& e) { return e.node.mode; });
  const auto doubted = std::exchange(doubted_, {});
  if (!blocker) {
    grant();
    return;
  }
  const bool same = doubted.watch_tag != 0 && round_.queue()[*blocker].node.name == doubted.name;
  if (!same) {
    watch_blocker(*blocker, out);
    return;
  }
  // Invariant (7): the doubted blocker is still listed. Its watch stands: a
  // notification still carries its tag, and the watchdog looks again later.
  round_.blocker = *blocker;
  round_.blocker_tag = doubted.watch_tag;
  if (*blocker == 0) {  // at the head: ask the leader
    round_.probed_watch = round_.blocker_tag;
    round_.probe_tag = next_tag();
    send(out, Req::probe_blocker, round_.probe_tag, doubted.name);
  }
}

// Invariant (7): waited on one blocker for the watchdog's period. Its
// notification may have been lost, or our server may still list a node the
// quorum deleted: list again, then look (evaluate).
void LockMachine::on_watchdog(Commands& out) {
  Doubted d{round_.queue()[round_.blocker].node.name, round_.blocker_tag};
  relist(out);  // forgets any earlier doubt: it applies to this listing only
  doubted_ = std::move(d);
}

// The leader's answer for the doubted head. Gone there while our server
// lists it: the server diverged. The blocker is gone as far as the grant
// rule goes; its watch, on our server, would never fire.
void LockMachine::on_probed(const MachineEvent& ev, Commands& out) {
  if (ev.rc != Rc::no_node) return;  // it exists (bad version), or nothing proven
  // Only for the blocker probed, still watched: not one that took its place
  // meanwhile (its watch fired, and the round went on to another).
  if (round_.blocker_tag == 0 || round_.blocker_tag != round_.probed_watch) return;
  const auto& blocker = round_.queue()[round_.blocker].node.name;
  MachineOutcome c{Out::diverged};
  c.message = "the leader has no node " + cfg_.lock_path + "/" + blocker +
              ", but this session's server still lists it at the head of the queue: that server has diverged "
              "from the quorum";
  report(out, std::move(c));
  round_.blocker_tag = 0;
  on_blocker_gone(out);
}

// The hand-off. The nodes ahead of us only ever shrink: our listing ran
// after our create, so it held every node created before ours, and nodes
// created later order after ours. If the blocker was the only node of that
// listing that could block us, its deletion leaves nothing ahead that blocks
// — released, abandoned or revoked alike — and no read is needed.
void LockMachine::on_blocker_gone(Commands& out) {
  const auto waiter = round_.queue()[round_.self].node.mode;
  bool only = true;
  for (std::size_t j = 0; j < round_.self && only; ++j) {
    only = j == round_.blocker || !model::blocks(waiter, round_.queue()[j].node.mode);
  }
  if (only) {
    grant();
    return;
  }
  round_.marker_tag = next_tag();
  send(out, Req::read_marker, round_.marker_tag);
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
  const auto& blocker = round_.queue()[round_.blocker].node;
  if (ev.rc != Rc::ok || ev.data != blocker.name) {
    relist(out);
    return;
  }
  if (blocker.mode == Mode::exclusive) {
    grant();
    return;
  }
  std::vector<std::string> names;
  for (std::size_t j = 0; j < round_.self; ++j) {
    if (j != round_.blocker && model::blocks(round_.queue()[round_.self].node.mode, round_.queue()[j].node.mode)) {
      names.push_back(round_.queue()[j].node.name);
    }
  }
  if (names.empty()) {
    grant();
    return;
  }
  read_stats(StatsFor::candidates, std::move(names), out);
}

// The nearest earlier node that still exists and blocks us is watched next.
// REQUIRES one stat per name read (step() checks).
void LockMachine::on_candidates(const MachineEvent& ev, Commands& out) {
  std::optional<std::size_t> nearest;
  for (std::size_t i = 0; i < round_.stats_names.size(); ++i) {
    const auto rc = ev.stats[i].rc;
    if (rc == Rc::connection_loss) {
      transient(out);
      return;
    }
    if (rc == Rc::no_node) continue;
    for (std::size_t j = 0; j < round_.self; ++j) {
      if (round_.queue()[j].node.name == round_.stats_names[i] && (!nearest || j > *nearest)) nearest = j;
    }
  }
  if (!nearest) {
    grant();
    return;
  }
  watch_blocker(*nearest, out);
}

// One deletion watch, on one node of the queue: no herd.
void LockMachine::watch_blocker(std::size_t index, Commands& out) {
  round_.blocker = index;
  round_.blocker_tag = next_tag();
  send(out, Req::watch_blocker, round_.blocker_tag, round_.queue()[index].node.name);
}

// Pipelined exists (no watch) on `names`; the answer goes to `purpose`.
void LockMachine::read_stats(StatsFor purpose, std::vector<std::string> names, Commands& out) {
  round_.stats_for = purpose;
  round_.stats_names = std::move(names);
  round_.stats_tag = next_tag();
  MachineRequest c{Req::read_stats};
  c.tag = round_.stats_tag;
  c.names = round_.stats_names;
  out.requests.push_back(std::move(c));
}

}  // namespace zklock::detail
