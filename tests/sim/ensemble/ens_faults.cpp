// The ensemble simulator's faults, one at a time, each healed before the
// next, and the liveness check after the last (ens_world.hpp). A cut link
// holds its bytes, as TCP does: they arrive after the heal if the
// connection survived, and are discarded if either end closed it meanwhile.
#include <string>
#include <vector>

#include "ens_world.hpp"

namespace zklock::ensim {

namespace {
Micros between(zklock::sim::Rng& rng, Micros lo, Micros hi) {
  return lo + static_cast<Micros>(rng.below(static_cast<std::uint64_t>(hi - lo + 1)));
}
}  // namespace

void World::schedule_faults() {
  const Micros follower_timeout = cfg_.sync_limit * cfg_.tick;
  // After the last heal: a long hold begun before it, an election, a
  // session timeout for the dead sessions, then every client's turn (holds
  // of at most 2.55 s each in the tail).
  const Micros tail = 6 * cfg_.timeout + 2 * follower_timeout + cfg_.clients * 4 * kSec + 10 * kSec;
  tail_len_ = tail;
  end_ = cfg_.fault_time + tail;  // moved on once the last fault has healed
  tail_from_ = cfg_.fault_time;
  at_real(-1, 3 * kSec, [this] { inject(cfg_.fault_time); });
  if (cfg_.revocations) at_real(-1, 5 * kSec, [this] { revoke_loop(); });
}

// The detector, now and then while the faults run: a node revoked.
void World::revoke_loop() {
  if (now_ >= cfg_.fault_time || stop_) return;
  revoke_one();
  at_real(-1, now_ + between(shell_rng_, 4 * kSec, 15 * kSec), [this] { revoke_loop(); });
}

void World::inject(Micros until) {
  if (now_ >= until) {
    tail_from_ = now_;
    end_ = now_ + tail_len_;
    settled_from_ = now_ + 2 * cfg_.timeout + 2 * cfg_.sync_limit * cfg_.tick + 2 * kSec;
    trace("faults over; settled from " + std::to_string(settled_from_ / kMs) + " ms");
    return;
  }
  int leader = -1;
  for (const auto& sv : servers_) {
    if (sv.role == Role::leading && paused_until_[static_cast<std::size_t>(sv.id)] <= now_) leader = sv.id;
  }
  const Micros st = cfg_.sync_limit * cfg_.tick;
  Micros heal_at = now_;
  std::string kind;
  const auto pick = rng_.below(static_cast<std::uint64_t>(cfg_.fault_kinds));
  std::vector<std::pair<int, int>> touched;  // links to heal
  if (pick == 0) {
    kind = "member partitioned";
    const int x = static_cast<int>(rng_.below(kServers));
    for (int y = 0; y < kServers; ++y) {
      if (y == x) continue;
      link(x, y).dir[0].held = link(x, y).dir[1].held = true;
      touched.emplace_back(x, y);
    }
    heal_at = now_ + between(rng_, cfg_.tick, 3 * st);
  } else if (pick == 1 && leader >= 0) {
    kind = "leader cut (gray)";
    // The followers' side is reset, the leader's side open but silent: it
    // notices only by syncLimit.
    const auto followers = servers_[static_cast<std::size_t>(leader)].followers;
    for (const auto& [f, heard] : followers) {
      link(leader, f).dir[0].held = link(leader, f).dir[1].held = true;
      touched.emplace_back(leader, f);
      go_looking(f, "connection to the leader reset");
    }
    heal_at = now_ + between(rng_, st / 2, 2 * st + cfg_.timeout);
  } else if (pick == 2 && leader >= 0 && !servers_[static_cast<std::size_t>(leader)].followers.empty()) {
    kind = "leader stream held, then cut";
    const auto& fs = servers_[static_cast<std::size_t>(leader)].followers;
    auto fit = fs.begin();
    std::advance(fit, static_cast<long>(rng_.below(fs.size())));
    const int f = fit->first;
    link(leader, f).dir[leader < f ? 0 : 1].held = true;
    touched.emplace_back(leader, f);
    const Micros cut_at = now_ + between(rng_, 0, cfg_.tick * 3 / 2);
    at_real(-1, cut_at, [this, leader, f] { link(leader, f).dir[f < leader ? 0 : 1].held = true; });
    heal_at = cut_at + between(rng_, cfg_.tick, 2 * st);
  } else if (pick == 8 && leader >= 0 && !servers_[static_cast<std::size_t>(leader)].followers.empty()) {
    kind = "follower stream held";
    // One direction only: the follower's replies, touches and forwarded
    // requests wait while the leader's pings and commits still arrive; up
    // to a little past syncLimit, after which the leader drops the follower.
    const auto& fs = servers_[static_cast<std::size_t>(leader)].followers;
    auto fit = fs.begin();
    std::advance(fit, static_cast<long>(rng_.below(fs.size())));
    const int f = fit->first;
    link(leader, f).dir[f < leader ? 0 : 1].held = true;
    touched.emplace_back(leader, f);
    heal_at = now_ + between(rng_, cfg_.tick, st + cfg_.tick);
  } else if (pick == 3 || pick == 4) {
    ClientState& cl = clients_[rng_.below(clients_.size())];
    const int c = cl.id, s = cl.server;
    if (pick == 3) {
      kind = "client connection reset";
      servers_[static_cast<std::size_t>(s)].clients.erase(c);
      send_close(s, c, [this, c] { on_client_closed(c, false); });
      reset_view(s, c);
    } else {
      kind = "client connection silent";
      link(c, s).dir[0].held = link(c, s).dir[1].held = true;
      touched.emplace_back(c, s);
      heal_at = now_ + between(rng_, cfg_.timeout / 5, 2 * cfg_.timeout);
    }
  } else if (pick == 5) {
    kind = "client paused";
    const auto& cl = clients_[rng_.below(clients_.size())];
    const Micros d = between(rng_, cfg_.timeout / 3, cfg_.timeout * 5 / 2);
    pause(cl.id, d);
    heal_at = now_ + d;
  } else if (pick == 6) {
    kind = "server paused";
    const int s = leader >= 0 && rng_.chance(500) ? leader : static_cast<int>(rng_.below(kServers));
    const Micros d = between(rng_, cfg_.tick / 5, 3 * st);
    pause(s, d);
    heal_at = now_ + d;
  } else {
    kind = "server killed";
    const int s = leader >= 0 && rng_.chance(500) ? leader : static_cast<int>(rng_.below(kServers));
    const Micros d = between(rng_, 500 * kMs, 5 * kSec);
    kill(s, d);
    heal_at = now_ + d;
  }
  if (kind.empty()) {  // no leader just now for a leader fault
    at_real(-1, now_ + 500 * kMs, [this, until] { inject(until); });
    return;
  }
  ++res_.c.faults;
  ++res_.c.by_fault[kind];
  trace("FAULT " + kind + " until " + std::to_string(heal_at / kMs) + " ms");
  at_real(-1, heal_at, [this, touched, until, kind] {
    for (const auto& [a, b] : touched) {
      release_held(a, b);
    }
    trace("HEAL " + kind);
    at_real(-1, now_ + between(rng_, 200 * kMs, 3 * kSec), [this, until] { inject(until); });
  });
}

// L1: once the faults are over, every client is handed a lease again; no
// node in the leader's tree belongs to an attempt that has finished.
void World::finish_checks() {
  for (const auto& cl : clients_) {
    if (cfg_.check_liveness && cl.last_handout < tail_from_) {
      fail("L1: c" + std::to_string(cl.id) + " was not handed a lease in the " +
           std::to_string((end_ - tail_from_) / kMs) + " ms after the last heal (" +
           (cl.connected ? "connected" : "disconnected") + ", " + std::to_string(cl.ms.size()) + " machines, " +
           std::to_string(cl.inflight.size()) + " requests in flight)");
      return;
    }
  }
  for (const auto& L : servers_) {
    if (L.role != Role::leading || !cfg_.check_liveness) continue;
    for (const auto& lock : locks_) {
      for (const auto& child : L.tree.at(lock).children) {
        const auto parsed = protocol::parse_lock_node_name(child);
        const auto g = parsed ? by_guid_.find(parsed->guid.substr(0, 24)) : by_guid_.end();
        if (g == by_guid_.end()) continue;
        if (machines_[static_cast<std::size_t>(g->second)].finished) {
          fail("L1: " + lock + "/" + child + " outlives m" + std::to_string(g->second) + ", the attempt that made it");
          return;
        }
      }
    }
  }
  for (auto& cl : clients_) {
    if (cl.session != 0) res_.c.session_time += now_ - cl.session_since;
  }
}

}  // namespace zklock::ensim
