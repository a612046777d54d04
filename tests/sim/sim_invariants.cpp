// The invariants, checked after every step (check_step, check_grant) and at
// the end of a run (check_end), and at each user release (check_told). The
// first violation ends the run.
#include <algorithm>

#include "model/queue_order.hpp"
#include "sim_world.hpp"

namespace zklock::sim {

void World::violate(const std::string& what) {
  if (violation_.empty()) violation_ = what;
  if (cfg_.trace || cfg_.print_trace) note("VIOLATION " + what);
}

namespace {
std::string holder_text(const MachineRec& r, int id) {
  return " m" + std::to_string(id) + "(" + std::string(mode_name(r.m->config().mode)) + " " +
         r.held_path.substr(r.held_path.rfind('/') + 1) + " token=" + token_text(r.token) + ")";
}
}  // namespace

// (1) Exclusion: among holding machines whose node still exists, one
// exclusive and no shared, or only shared.
void World::check_step() {
  for (std::size_t l = 0; l < holders_.size(); ++l) {
    int exclusive = 0, shared = 0;
    std::string who;
    for (int id : holders_[l]) {
      const auto& rec = machines_[static_cast<std::size_t>(id)];
      if (!rec.m->holding() || !zk_.find(rec.held_path)) continue;
      (rec.m->config().mode == Mode::exclusive ? exclusive : shared) += 1;
      who += holder_text(rec, id);
    }
    if (exclusive > 1 || (exclusive == 1 && shared > 0)) {
      violate("exclusion (1) on " + locks_[l] + ":" + who);
      return;
    }
  }
}

// (6) Liveness of the head: a machine whose node holds in the server's tree
// (nothing earlier blocks it), still acquiring, with its session connected
// and quiet (nothing in flight, nothing to deliver, no local answer pending)
// has nothing left that could grant it: it must have been granted already.
// This is a failure seen in the field (each head connected, not granted),
// checked after every step rather than inferred from a timeout.
void World::check_heads() {
  if (!local_.empty()) return;
  for (const auto& lock : locks_) {
    const Node* dir = zk_.find(lock);
    if (!dir || dir->children.empty()) continue;
    struct Child {
      protocol::LockNodeName name;
      std::int64_t czxid;
    };
    std::vector<Child> queue;
    for (const auto& c : dir->children) {
      auto parsed = protocol::parse_lock_node_name(c);
      const Node* n = zk_.find(lock + "/" + c);
      if (parsed && n) queue.push_back(Child{std::move(*parsed), n->czxid});
    }
    // Creation order is czxid order (model/queue_order.hpp): the tree knows every czxid.
    std::sort(queue.begin(), queue.end(), [](const Child& a, const Child& b) { return a.czxid < b.czxid; });
    const auto holds = model::holders(queue, [](const Child& c) { return c.name.mode; });
    for (std::size_t i = 0; i < queue.size() && holds[i]; ++i) {
      const auto g = by_guid_.find(queue[i].name.guid.substr(0, 24));
      if (g == by_guid_.end()) continue;
      const auto& rec = machines_[static_cast<std::size_t>(g->second)];
      if (rec.actor < 0) continue;
      const auto& slot = slots_[static_cast<std::size_t>(actors_[static_cast<std::size_t>(rec.actor)].slot)];
      if (slot.state != Slot::connected || slot.sid != rec.m->config().epoch || !slot.held.empty()) continue;
      if (!zk_.quiet(slot.sid)) continue;
      if (rec.notification_lost) continue;  // its watchdog moves it (the tail's liveness check judges that)
      ++counters_.quiet_heads;  // the check had a case to judge
      if (rec.m->phase() != detail::LockMachine::Phase::acquiring) continue;
      violate("head liveness (6): m" + std::to_string(g->second) + "'s node " + queue[i].name.name + " of " + lock +
              " holds, its session is connected and quiet, and it is still acquiring: nothing will grant it");
      return;
    }
  }
}

// (2) Tokens in grant order, as a fence orders them, (czxid, lease ordinal):
// an exclusive grant's token exceeds every earlier grant's on the lock, a
// shared grant's every earlier exclusive one's. Re-takes included: each is
// a lease of its own, so tokens strictly increase across the leases of a lock.
void World::check_grant(int id) {
  auto& rec = machines_[static_cast<std::size_t>(id)];
  if (!zk_.find(rec.held_path)) {
    // Granted on a stale view: its node was already deleted (revoked, or its
    // session expired) and the news is on its way. It holds nothing, so it
    // takes no place in the token order; it must report the loss (3).
    rec.must_lose = true;
    if (rec.granted > 1) ++counters_.stale_retakes;
    return;
  }
  const auto l = static_cast<std::size_t>(rec.lock);
  const bool exclusive = rec.m->config().mode == Mode::exclusive;
  const SimToken bound = exclusive ? max_token_[l] : max_exclusive_token_[l];
  if (rec.token <= bound) {
    violate("token order (2) on " + locks_[l] + ":" + holder_text(rec, id) + " granted after a grant with token " +
            token_text(bound));
  }
  max_token_[l] = std::max(max_token_[l], rec.token);
  if (exclusive) max_exclusive_token_[l] = std::max(max_exclusive_token_[l], rec.token);
}

// (3), while it matters: a holder whose node someone else deleted is told
// unless the news is still on its way. When the user releases while the
// machine still believes it holds, its session connected and quiet (nothing
// in flight, nothing to deliver, no local answer pending), nothing would ever
// have told it: no watch covered its node.
void World::check_told(int id) {
  const auto& rec = machines_[static_cast<std::size_t>(id)];
  if (!rec.must_lose) return;
  const auto& slot = slots_[static_cast<std::size_t>(actors_[static_cast<std::size_t>(rec.actor)].slot)];
  if (slot.state != Slot::connected || slot.sid != rec.m->config().epoch || !slot.held.empty() || !local_.empty()) {
    return;
  }
  if (!zk_.quiet(slot.sid)) return;
  ++counters_.quiet_losses;  // the check had a case to judge
  if (rec.lost != 0 || !rec.m->holding()) return;
  violate("loss (3): m" + std::to_string(id) + " still believes it holds " + rec.held_path +
          ", which someone else deleted, and its session is quiet: nothing will tell it");
}

bool World::quiescent() const {
  for (const auto& a : actors_) {
    if (a.state != Actor::idle) return false;
  }
  for (const auto& rec : machines_) {
    if (!rec.m->finished()) return false;
  }
  return true;
}

// At the end: let the server finish what is in flight, then (3) every
// granted node deleted by someone else was reported lost once, and (5) no
// lock node remains; then close every session.
void World::check_end() {
  for (int guard = 0; guard < 200000; ++guard) {
    bool did = false;
    for (auto& s : slots_) {
      if (zk_.can_deliver(s.sid)) {
        on_reply(zk_.deliver(s.sid));
        did = true;
      } else if (zk_.can_serve(s.sid)) {
        zk_.serve(s.sid);
        did = true;
      }
    }
    if (zk_.can_commit()) {
      zk_.commit();
      did = true;
    }
    drain_local();
    track_deletions();
    if (!did) break;
  }
  for (std::size_t id = 0; id < machines_.size(); ++id) {
    const auto& rec = machines_[id];
    if (!rec.m->finished()) {
      violate("liveness (4): m" + std::to_string(id) + " not finished after the run settled");
      return;
    }
    if (rec.knew_at_release && rec.lost == 0) ++counters_.deferred_losses;
    // A user who released before the machine knew needs no report.
    const bool excused = rec.release_requested && (!rec.knew_at_release || !cfg_.strict_loss);
    if (rec.must_lose && rec.lost != 1 && !excused) {
      violate("loss (3): m" + std::to_string(id) + "'s granted node was deleted by someone else; lost reported " +
              std::to_string(rec.lost) + " times" +
              (rec.knew_at_release ? " (it knew when the user released)" : ""));
      return;
    }
  }
  for (const auto& lock : locks_) {
    const Node* n = zk_.find(lock);
    if (!n || n->children.empty()) continue;
    std::string what = "orphan (5): nodes remain under " + lock + " with every machine finished:";
    for (const auto& c : n->children) {
      auto p = protocol::parse_lock_node_name(c);
      auto g = p ? by_guid_.find(p->guid.substr(0, 24)) : by_guid_.end();
      what += " " + c + (g != by_guid_.end() ? " (m" + std::to_string(g->second) + ")" : "");
    }
    violate(what);
    return;
  }
  for (auto& s : slots_) zk_.close(s.sid);
  zk_.commit_all();
  for (const auto& [path, node] : zk_.tree()) {
    if (node.owner != 0) {
      violate("orphan (5): ephemeral " + path + " outlived its session");
      return;
    }
  }
}

}  // namespace zklock::sim
