// The ensemble simulator's time, clocks and links (ens_world.hpp).
#include <cinttypes>
#include <cstdio>
#include <utility>

#include "ens_world.hpp"

namespace zklock::ensim {

const char* txn_name(TxnKind k) {
  switch (k) {
    case TxnKind::create_session: return "createSession";
    case TxnKind::close_session: return "closeSession";
    case TxnKind::create_node: return "create";
    case TxnKind::delete_node: return "delete";
    case TxnKind::heartbeat: return "heartbeat";
    case TxnKind::release_node: return "release";
    case TxnKind::probe_node: return "probe";
    case TxnKind::revoke_node: return "revoke";
  }
  return "?";
}

namespace {
// Session shapes (tickTime, syncLimit, session timeout): the test server's,
// the deposed-leader example (2 s, 5, 4 s), short and long syncLimits.
struct Shape { Micros tick; int sync_limit; Micros timeout; };
constexpr Shape kShapes[] = {
    {200 * kMs, 5, 2 * kSec}, {500 * kMs, 5, 4 * kSec}, {2 * kSec, 5, 4 * kSec},
    {200 * kMs, 2, 4 * kSec}, {500 * kMs, 10, 6 * kSec}, {2 * kSec, 2, 20 * kSec},
};
}  // namespace

World::World(Config cfg)
    : cfg_(cfg), rng_(cfg.seed * 0x9e3779b97f4a7c15ULL + 7), stall_rng_(cfg.seed * 0xbf58476d1ce4e5b9ULL + 11),
      shell_rng_(cfg.seed * 0x94d049bb133111ebULL + 13) {
  const auto& shape = kShapes[cfg.seed % (sizeof kShapes / sizeof kShapes[0])];
  if (cfg_.tick == 0) cfg_.tick = shape.tick;
  if (cfg_.expiry_stall < 0) cfg_.expiry_stall = cfg_.tick / 4;
  if (cfg_.sync_limit == 0) cfg_.sync_limit = shape.sync_limit;
  if (cfg_.timeout == 0) cfg_.timeout = shape.timeout;
  const int procs = kServers + cfg_.clients;
  for (int p = 0; p < procs; ++p) {
    offset_.push_back(static_cast<Micros>(rng_.below(1000 * kSec)));
    ppm_.push_back(static_cast<Micros>(rng_.below(101)) - 50);
    paused_until_.push_back(0);
  }
  servers_.resize(kServers);
  for (int s = 0; s < kServers; ++s) servers_[s].id = s;
  clients_.resize(static_cast<std::size_t>(cfg_.clients));
  for (int c = 0; c < cfg_.clients; ++c) clients_[static_cast<std::size_t>(c)].id = kServers + c;
  for (int l = 0; l < cfg_.locks; ++l) locks_.push_back("/locks/l" + std::to_string(l));
  last_token_.assign(locks_.size(), {0, 0});
  for (auto& sv : servers_) reset_db(sv);
  res_.cfg = cfg_;
}

Micros World::local(int proc) const {
  return offset_[static_cast<std::size_t>(proc)] + now_ + now_ * ppm_[static_cast<std::size_t>(proc)] / 1000000;
}

void World::at_real(int proc, Micros when, std::function<void()> fn) {
  q_.push(Event{when < now_ ? now_ : when, seq_++, proc, std::move(fn)});
}

void World::at_local(int proc, Micros local_delay, std::function<void()> fn) {
  // A local duration d takes d / (1 + ppm) of real time.
  // Rounded up, so that the local clock has reached the deadline when it runs.
  const Micros rate = 1000000 + ppm_[static_cast<std::size_t>(proc)];
  const Micros real = (local_delay * 1000000 + rate - 1) / rate;
  at_real(proc, now_ + real, std::move(fn));
}

Link& World::link(int a, int b) { return links_[{std::min(a, b), std::max(a, b)}]; }

Micros World::lat(int a, int b) {
  const bool member = a < kServers && b < kServers;
  Micros base = member ? 200 + static_cast<Micros>(rng_.below(1800)) : 100 + static_cast<Micros>(rng_.below(1400));
  if (rng_.chance(5)) base += static_cast<Micros>(rng_.below(40 * kMs));  // a slow packet now and then
  return base;
}

// Onto the link's direction: held while it is cut, else after the
// previous delivery (FIFO).
void World::enqueue(int from, int to, std::function<void()> deliver) {
  Link::Dir& dir = link(from, to).dir[from < to ? 0 : 1];
  if (dir.held) {
    dir.held_q.emplace_back(to, std::move(deliver));
    return;
  }
  const Micros when = std::max(now_ + lat(from, to), dir.last);
  dir.last = when;
  at_real(to, when, std::move(deliver));
}

void World::send(int from, int to, std::function<void()> fn) {
  const std::uint64_t view = link(from, to).view[from < to ? 0 : 1];
  enqueue(from, to, [this, from, to, view, fn = std::move(fn)] {
    Link& l = link(from, to);
    if (l.view[from < to ? 1 : 0] != view) return;  // the receiver's end is another connection
    if (l.view[from < to ? 0 : 1] != view) return;  // the sender closed this one since
    fn();
  });
}

void World::send_close(int from, int to, std::function<void()> fn) {
  const std::uint64_t view = link(from, to).view[from < to ? 0 : 1];
  enqueue(from, to, [this, from, to, view, fn = std::move(fn)] {
    if (link(from, to).view[from < to ? 1 : 0] == view) fn();  // the receiver still has this connection
  });
}

void World::release_held(int a, int b) {
  Link& l = link(a, b);
  for (auto& dir : l.dir) {
    dir.held = false;
    while (!dir.held_q.empty()) {
      auto [to, fn] = std::move(dir.held_q.front());
      dir.held_q.pop_front();
      const Micros when = std::max(now_ + lat(a, b), dir.last);
      dir.last = when;
      at_real(to, when, std::move(fn));
    }
  }
}

void World::connect_link(int a, int b) {
  Link& l = link(a, b);
  l.view[0] = l.view[1] = ++link_gen_;
}

void World::reset_view(int proc, int peer) {
  Link& l = link(proc, peer);
  l.view[proc < peer ? 0 : 1] = ++link_gen_;
}

bool World::reachable(int a, int b) const {
  const auto it = links_.find({std::min(a, b), std::max(a, b)});
  if (it == links_.end()) return true;
  return !it->second.dir[0].held && !it->second.dir[1].held;
}

void World::trace(const std::string& s) {
  char head[48];
  std::snprintf(head, sizeof head, "%10.3f ms  ", static_cast<double>(now_) / kMs);
  if (cfg_.print_trace) std::printf("%s%s\n", head, s.c_str());
  res_.trace.push_back(head + s);
  while (res_.trace.size() > cfg_.trace_keep) res_.trace.pop_front();
}

void World::fail(const std::string& what) {
  if (!res_.ok) return;
  res_.ok = false;
  res_.violation = what;
  res_.step = res_.c.steps;
  res_.at = now_;
  trace("VIOLATION: " + what);
  stop_ = true;
}

void World::pause(int proc, Micros for_us) {
  paused_until_[static_cast<std::size_t>(proc)] = now_ + for_us;
  if (proc < kServers) {
    // The proof assumes a leader pings every follower at least every 0.75 x
    // tickTime while it does anything at all: resumed, its ping loop runs
    // before the backlog (scheduled now, so ahead of every deferred event).
    const auto gen = servers_[static_cast<std::size_t>(proc)].gen;
    at_real(proc, now_ + for_us, [this, proc, gen] {
      if (servers_[static_cast<std::size_t>(proc)].role == Role::leading) leader_loop(proc, gen);
    });
  }
}

Result World::run() {
  start_servers();
  start_clients();
  schedule_faults();
  while (!q_.empty() && !stop_) {
    Event e = q_.top();
    q_.pop();
    if (e.at > end_) break;
    now_ = e.at;
    if (e.proc >= 0 && paused_until_[static_cast<std::size_t>(e.proc)] > now_) {
      // Stopped: it runs, in order, when the process resumes.
      q_.push(Event{paused_until_[static_cast<std::size_t>(e.proc)], seq_++, e.proc, std::move(e.fn)});
      continue;
    }
    ++res_.c.steps;
    e.fn();
  }
  now_ = std::max(now_, end_);
  if (res_.ok) finish_checks();
  res_.c.sim_time = now_;
  return res_;
}

Result run(Config cfg) {
  World w(cfg);
  return w.run();
}

const char* rule_name(Rule r) {
  switch (r) {
    case Rule::chain: return "chain";
    case Rule::sync_pairing: return "sync_pairing";
    case Rule::chain_unanchored: return "chain_unanchored";
  }
  return "?";
}

std::string describe(const Result& r) {
  char head[512];
  std::snprintf(head, sizeof head,
                "seed %" PRIu64 " (%s; tick %lld ms, syncLimit %d, session %lld ms, expiry stall <= %.1f ms): %s at "
                "step %" PRIu64 ", %.3f s\n",
                r.cfg.seed, rule_name(r.cfg.rule), static_cast<long long>(r.cfg.tick / kMs), r.cfg.sync_limit,
                static_cast<long long>(r.cfg.timeout / kMs), static_cast<double>(r.cfg.expiry_stall) / kMs,
                r.ok ? "ok" : r.violation.c_str(), r.step,
                static_cast<double>(r.at) / kSec);
  std::string s = head;
  for (const auto& line : r.trace) s += "  " + line + "\n";
  return s;
}

}  // namespace zklock::ensim
