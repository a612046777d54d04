// The world of one run: its shape from the seed, the scheduler that picks
// each step, the faults, and run_sim.
#include "sim_world.hpp"

#include <climits>
#include <cstdio>
#include <sstream>

#include "zklock/protocol/revoke.hpp"

namespace zklock::sim {

using Kind = detail::MachineEvent::Kind;

const char* regime_name(Regime r) {
  switch (r) {
    case Regime::normal: return "normal";
    case Regime::saturated: return "saturated";
    case Regime::wrap: return "wrap";
  }
  return "?";
}

World::World(const SimConfig& cfg)
    : cfg_(cfg), rng_(cfg.seed * 0x2545f4914f6cdd1dULL + 1), zk_(SimZk::Options{cfg.regime == Regime::wrap, false}, rng_) {}

void World::note(const std::string& line) {
  std::string l = std::to_string(now_) + " " + line;
  if (cfg_.print_trace) std::printf("%s\n", l.c_str());
  if (!cfg_.trace) return;
  ring_.push_back(std::move(l));
  if (ring_.size() > cfg_.trace_keep) ring_.pop_front();
}

// The run's shape: a few locks, a few client processes, a mix of actors.
void World::setup() {
  const bool lone = cfg_.lone_retainer;
  const int n_locks = lone ? 1 : 1 + static_cast<int>(rng_.below(4));
  const int n_slots = lone ? 1 : 3 + static_cast<int>(rng_.below(6));
  static const std::uint32_t commit_w[] = {2, 5, 15, 60};
  static const std::uint32_t fault_w[] = {0, 1, 2, 4};
  w_commit_ = commit_w[rng_.below(4)];
  w_fault_ = fault_w[rng_.below(4)];
  hold_max_ = 2 + static_cast<std::uint32_t>(rng_.below(80));
  validity_after_ = 3 + static_cast<std::uint32_t>(rng_.below(40));

  zk_.seed_node("/zklock", false, 0);
  zk_.seed_node("/zklock/revocations", false, 0);
  zk_.seed_node("/locks", true, 0);
  for (int i = 0; i < n_locks; ++i) {
    locks_.push_back("/locks/l" + std::to_string(i));
    // Near the counter's end: saturation (3.8.0) or the wrap to negative.
    if (cfg_.regime != Regime::normal) {
      zk_.seed_node(locks_.back(), true, INT32_MAX - static_cast<std::int32_t>(rng_.below(8)));
    } else if (rng_.chance(500)) {
      zk_.seed_node(locks_.back(), true, 0);
    }
  }
  max_token_.assign(locks_.size(), SimToken{});
  max_exclusive_token_.assign(locks_.size(), SimToken{});
  holders_.assign(locks_.size(), {});
  for (int i = 0; i < n_slots; ++i) {
    Slot s;
    s.sid = zk_.open_session();
    slots_.push_back(std::move(s));
  }
  for (int i = 0; i < n_slots; ++i) {
    const int kinds = lone ? 1 : 1 + static_cast<int>(rng_.below(2));
    for (int k = 0; k < kinds; ++k) {
      Actor a;
      a.slot = i;
      a.owner = "owner-" + std::to_string(actors_.size());
      a.mode = !lone && rng_.chance(350) ? Mode::shared : Mode::exclusive;
      a.policy = rng_.chance(150) ? LossPolicy::strict : LossPolicy::tolerant;
      a.wake = rng_.below(20);
      if (!lone && n_locks >= 2 && rng_.chance(250)) {
        a.kind = Actor::multi;
        for (int l = 0; l < n_locks; ++l) {
          if (rng_.chance(600)) a.locks.push_back(l);
        }
        if (a.locks.size() < 2) a.locks = {0, n_locks - 1};
      }
      a.retains = lone || (a.kind == Actor::single && a.mode == Mode::exclusive && rng_.chance(400));
      actors_.push_back(std::move(a));
      // Pipelined: a second owner on the same session, started back to back.
      if (!lone && actors_.back().kind == Actor::single && rng_.chance(400)) {
        const int leader = static_cast<int>(actors_.size()) - 1;
        Actor b = actors_.back();
        b.owner = "owner-" + std::to_string(actors_.size());
        b.follower = true;
        b.retains = false;
        b.mode = rng_.chance(300) ? Mode::shared : Mode::exclusive;
        actors_.push_back(std::move(b));
        actors_[leader].partner = leader + 1;
      }
    }
  }
  if (cfg_.trace) {
    note("setup " + std::string(regime_name(cfg_.regime)) + " locks=" + std::to_string(n_locks) +
         " sessions=" + std::to_string(n_slots) + " actors=" + std::to_string(actors_.size()) +
         " w_commit=" + std::to_string(w_commit_) + " w_fault=" + std::to_string(w_fault_) +
         " hold_max=" + std::to_string(hold_max_) + " validity_after=" + std::to_string(validity_after_));
  }
}

namespace {
enum class Act { deliver, serve, commit, actor, disconnect, reconnect, validity, expire, learn, replace, revoke, reap, retain,
                 watchdog, prove };
struct Choice {
  Act act;
  int arg;
  std::uint32_t weight;
};
}  // namespace

// One step: pick one enabled action at random (weighted) and run it.
bool World::step_once() {
  Choice choices[64];
  int n = 0;
  std::uint32_t total = 0;
  auto add = [&](Act a, int arg, std::uint32_t w) {
    if (w == 0 || n == 64) return;
    choices[n++] = Choice{a, arg, w};
    total += w;
  };
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    const auto& s = slots_[i];
    if (zk_.can_deliver(s.sid)) add(Act::deliver, i, 40);
    if (zk_.can_serve(s.sid)) add(Act::serve, i, 30);
    if (s.state == Slot::replacing) add(Act::replace, i, 20);
    // Evidence on a new connection raises the bound again (validity_proven).
    if (s.state == Slot::connected && s.validity_sent) add(Act::prove, i, 20);
    if (tail_) continue;
    if (s.state == Slot::connected) add(Act::disconnect, i, w_fault_);
    if (s.state == Slot::disconnected) {
      add(Act::reconnect, i, 15);
      if (!s.validity_sent && now_ >= s.since + validity_after_) add(Act::validity, i, 20);
      if (s.validity_sent) add(Act::expire, i, 6);
    }
    if (s.state == Slot::server_expired) add(Act::learn, i, 20);
  }
  // Commits keep up with the pipeline's depth: a few writes overlap, not hundreds.
  const auto depth = static_cast<std::uint32_t>(zk_.pipeline_size());
  if (depth > 0) add(Act::commit, 0, w_commit_ * depth * depth);
  for (int a = 0; a < static_cast<int>(actors_.size()); ++a) {
    const auto& ac = actors_[a];
    const bool due = now_ >= ac.wake &&
                     ((ac.state == Actor::idle && !ac.follower && !tail_) ||
                      (ac.state == Actor::acquiring && ac.cancel_armed) || ac.state == Actor::holding);
    // A retainer whose session is over and not yet replaced asks again at
    // once now and then: a frozen process's queued request runs as it wakes
    // (the story of tests/loss/frozen_retainer_test.cpp).
    const auto ss = slots_[static_cast<std::size_t>(ac.slot)].state;
    const bool dead = ss == Slot::server_expired || ss == Slot::replacing;
    if (due) add(Act::actor, a, 20);
    else if (dead && ac.retained >= 0 && ac.state == Actor::idle && !tail_) add(Act::actor, a, 20);
    if (ac.retained >= 0 && now_ >= ac.retain_until && ac.state == Actor::idle) add(Act::retain, a, 20);
    // The shell's waiting watchdog, for an actor that waits (its machines
    // ignore it unless they wait on a blocker); rare next to a hand-off.
    if (ac.state == Actor::acquiring && cfg_.drop_notifications != 0) add(Act::watchdog, a, 1);
    // A grant waiting for its proof after a lapse the clock saw while
    // connected: the next heartbeat proves the bound again.
    if (ac.state == Actor::acquiring && !ac.ms.empty() &&
        machines_[static_cast<std::size_t>(ac.ms.back())].m->phase() == detail::LockMachine::Phase::proving) {
      add(Act::prove, ac.slot, 10);
    }
  }
  if (!tail_) {
    add(Act::revoke, 0, w_fault_ / 2);
    add(Act::reap, 0, w_fault_ ? 1 : 0);
  }
  if (n == 0) return false;  // time passes
  std::uint32_t r = static_cast<std::uint32_t>(rng_.below(total));
  int k = 0;
  while (r >= choices[k].weight) r -= choices[k++].weight;
  const Choice c = choices[k];
  auto& slot = slots_[static_cast<std::size_t>(c.arg)];
  switch (c.act) {
    case Act::deliver: on_reply(zk_.deliver(slot.sid)); break;
    case Act::serve: zk_.serve(slot.sid); break;
    case Act::commit: zk_.commit(); break;
    case Act::actor: actor_tick(c.arg); break;
    case Act::disconnect: disconnect(c.arg); break;
    case Act::reconnect: reconnect(c.arg); break;
    case Act::validity:
      slot.validity_sent = true;
      session_event(c.arg, Kind::validity_expired);
      break;
    case Act::expire:
      if (cfg_.trace || cfg_.print_trace) note("EXPIRE session " + std::to_string(slot.sid));
      zk_.expire(slot.sid);
      slot.state = Slot::server_expired;
      ++counters_.expiries;
      break;
    case Act::learn: learn_expiry(c.arg); break;
    case Act::replace: replace_session(c.arg); break;
    case Act::revoke: revoke(); break;
    case Act::reap: reap(); break;
    case Act::retain: retain_deadline(c.arg); break;
    case Act::prove:
      if (slot.state == Slot::connected) slot.validity_sent = false;
      session_event(c.arg, Kind::validity_proven);
      break;
    case Act::watchdog: {
      ++counters_.watchdogs;
      const auto ms = actors_[static_cast<std::size_t>(c.arg)].ms;  // feed() may start more
      for (int m : ms) feed(m, detail::MachineEvent{Kind::watchdog});
      break;
    }
  }
  drain_local();
  track_deletions();
  return true;
}

void World::session_event(int slot, Kind kind) {
  detail::MachineEvent ev{kind};
  ev.epoch = slots_[static_cast<std::size_t>(slot)].sid;
  auto& list = slots_[static_cast<std::size_t>(slot)].machines;
  std::erase_if(list, [&](int m) { return machines_[static_cast<std::size_t>(m)].m->finished(); });
  const auto ms = list;  // feed() may add machines
  for (int m : ms) {
    if (machines_[static_cast<std::size_t>(m)].session == ev.epoch) feed(m, ev);
  }
}

// The connection drops: every unanswered request answers connection_loss;
// what happened to each unanswered write is the seed's choice.
void World::disconnect(int i) {
  auto& s = slots_[static_cast<std::size_t>(i)];
  ++counters_.disconnects;
  std::string fates;
  auto lost = zk_.disconnect(s.sid, [&] {
    const auto f = rng_.below(3);
    fates += "ADL"[f];  // applied, dropped, later
    return f == 0 ? LostFate::applied : f == 1 ? LostFate::dropped : LostFate::later;
  });
  if (cfg_.trace || cfg_.print_trace) {
    note("DISCONNECT session " + std::to_string(s.sid) + " unanswered=" + std::to_string(lost.size()) +
         " write fates=" + fates);
  }
  s.state = Slot::disconnected;
  s.since = now_;
  s.validity_sent = false;
  for (auto cookie : lost) local_.emplace_back(cookie, Zrc::connection_loss);
  drain_local();
  session_event(i, Kind::disconnected);
}

void World::reconnect(int i) {
  auto& s = slots_[static_cast<std::size_t>(i)];
  if (cfg_.trace || cfg_.print_trace) note("RECONNECT session " + std::to_string(s.sid));
  zk_.reconnect(s.sid);
  s.state = Slot::connected;
  for (auto& r : std::exchange(s.held, {})) zk_.send(std::move(r));
  session_event(i, Kind::reconnected);
}

// The client finds its session expired: held requests answer
// session_expired and the machines hear `expired`; the next session starts
// in a later step (replace_session), as the shell's timer thread opens it.
void World::learn_expiry(int i) {
  auto& s = slots_[static_cast<std::size_t>(i)];
  if (cfg_.trace || cfg_.print_trace) note("EXPIRED (client) session " + std::to_string(s.sid));
  s.state = Slot::replacing;
  for (auto& r : std::exchange(s.held, {})) local_.emplace_back(r.cookie, Zrc::session_expired);
  drain_local();
  session_event(i, Kind::expired);
}

void World::replace_session(int i) {
  auto& s = slots_[static_cast<std::size_t>(i)];
  s.sid = zk_.open_session();
  if (cfg_.trace || cfg_.print_trace) note("NEW SESSION " + std::to_string(s.sid));
  s.state = Slot::connected;
  s.machines.clear();
}

// The detector revokes a node: deletes it and writes the record, in one multi.
void World::revoke() {
  const int l = static_cast<int>(rng_.below(locks_.size()));
  const Node* lock = zk_.find(locks_[static_cast<std::size_t>(l)]);
  if (!lock || lock->children.empty()) return;
  auto it = lock->children.begin();
  std::advance(it, static_cast<long>(rng_.below(lock->children.size())));
  if (!revoked_.insert(*it).second) return;  // one revocation per node
  Request r;
  r.kind = ReqKind::multi_revoke;
  r.path = locks_[static_cast<std::size_t>(l)] + "/" + *it;
  r.path2 = "/zklock/revocations/" + *it;
  if (rng_.chance(500)) {
    protocol::RevocationRecord rec;
    rec.victim_node = r.path;
    rec.policy = "operator";
    rec.detector = "sim";
    rec.reason = "simulated revocation";
    r.data = protocol::encode_revocation_record(rec);
  } else {
    r.data = "not json {";
  }
  if (cfg_.trace || cfg_.print_trace) note("REVOKE " + r.path);
  ++counters_.revocations;
  zk_.send(std::move(r));
}

// The container reaper: an emptied container that has had children goes.
void World::reap() {
  std::vector<std::string> candidates{"/locks"};
  candidates.insert(candidates.end(), locks_.begin(), locks_.end());
  const auto& path = candidates[rng_.below(candidates.size())];
  const Node* n = zk_.find(path);
  if (!n || !n->container || !n->had_children || !n->children.empty()) return;
  if (cfg_.trace || cfg_.print_trace) note("REAP " + path);
  ++counters_.reaps;
  Request r;
  r.kind = ReqKind::reap;
  r.path = path;
  zk_.send(std::move(r));
}

void World::begin_tail() {
  tail_ = true;
  if (cfg_.trace || cfg_.print_trace) note("TAIL: no more faults");
  for (int i = 0; i < static_cast<int>(slots_.size()); ++i) {
    if (slots_[static_cast<std::size_t>(i)].state == Slot::disconnected) reconnect(i);
    if (slots_[static_cast<std::size_t>(i)].state == Slot::server_expired) learn_expiry(i);
    if (slots_[static_cast<std::size_t>(i)].state == Slot::replacing) replace_session(i);
  }
  for (auto& a : actors_) a.cancel_armed = false;
}

SimResult World::run() {
  setup();
  for (now_ = 0;; ++now_) {
    if (now_ == cfg_.steps) begin_tail();
    step_once();
    if (violation_.empty()) check_step();
    if (violation_.empty()) check_heads();
    if (!violation_.empty()) break;
    if (tail_ && (now_ % 32) == 0 && quiescent()) {
      counters_.tail_steps = now_ - cfg_.steps;
      check_end();
      break;
    }
    if (tail_ && now_ >= cfg_.steps + cfg_.tail_bound) {
      std::string who;
      for (std::size_t id = 0; id < machines_.size() && who.size() < 400; ++id) {
        const auto& m = *machines_[id].m;
        if (m.finished()) continue;
        const auto& a = actors_[static_cast<std::size_t>(machines_[id].actor)];
        who += " m" + std::to_string(id) + "(phase " + std::to_string(static_cast<int>(m.phase())) + ", " +
               m.node_name() + ", actor state " + std::to_string(static_cast<int>(a.state)) + ")";
      }
      for (const auto& lock : locks_) {  // the queues, in czxid order
        const Node* n = zk_.find(lock);
        if (!n || n->children.empty()) continue;
        std::map<std::int64_t, std::string> q;
        for (const auto& c : n->children) {
          auto p = protocol::parse_lock_node_name(c);
          auto g = p ? by_guid_.find(p->guid.substr(0, 24)) : by_guid_.end();
          q[zk_.find(lock + "/" + c)->czxid] =
              c.substr(0, 2) + (p ? p->guid.substr(0, 6) : c) + "_" + (p ? std::to_string(p->sequence) : "") +
              (g != by_guid_.end() ? "=m" + std::to_string(g->second) : "");
        }
        who += "\n  " + lock + ":";
        for (const auto& [czxid, text] : q) who += " " + std::to_string(czxid) + ":" + text;
      }
      violate("liveness (4): not settled " + std::to_string(cfg_.tail_bound) + " steps after the faults stopped:" + who);
      break;
    }
  }
  SimResult r;
  r.ok = violation_.empty();
  r.violation = violation_;
  r.step = now_;
  counters_.steps = now_ + 1;
  const auto& st = zk_.stats();
  counters_.commits = st.commits;
  counters_.negative_suffixes = st.negative_suffixes;
  counters_.overlapping_creates = st.overlapping_creates;
  counters_.max_pipeline = st.max_pipeline;
  counters_.max_child_watches = st.max_child_watches;
  r.counters = counters_;
  for (const auto& l : ring_) r.trace += l + "\n";
  return r;
}

SimResult run_sim(const SimConfig& cfg) {
  SimResult r;
  try {
    r = World(cfg).run();
  } catch (const std::exception& e) {
    r.ok = false;
    r.violation = std::string("exception: ") + e.what();
  }
  if (r.ok || cfg.trace) return r;
  SimConfig replay = cfg;
  replay.trace = true;
  SimResult again;
  try {
    again = World(replay).run();
  } catch (const std::exception& e) {
    again.ok = false;
    again.violation = std::string("exception: ") + e.what();
  }
  r.trace = again.trace;
  if (again.violation != r.violation || (again.step != r.step && again.step != 0)) {
    r.trace += "REPLAY DIVERGED: " + again.violation + " at step " + std::to_string(again.step) + "\n";
  }
  return r;
}

std::string describe(const SimConfig& cfg, const SimResult& r) {
  std::ostringstream o;
  o << "seed " << cfg.seed << " (" << regime_name(cfg.regime) << ", steps " << cfg.steps << "): ";
  if (r.ok) {
    o << "ok";
  } else {
    o << "VIOLATION at step " << r.step << ": " << r.violation << "\nreplay: ZKLOCK_SIM_SEED=" << cfg.seed
      << " ZKLOCK_SIM_REGIME=" << regime_name(cfg.regime) << "\nlast events:\n"
      << r.trace;
  }
  return o.str();
}

}  // namespace zklock::sim
