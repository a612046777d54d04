// The ensemble simulator's servers: roles, elections, Zab's proposals and
// commits, pings and the session tracker (ens_world.hpp). What 3.8.0 does is
// cited where the model follows it; docs/design.md has the longer account.
#include <algorithm>
#include <string>

#include "ens_world.hpp"

namespace zklock::ensim {

Micros World::fsync_delay() { return 500 + static_cast<Micros>(rng_.below(7500)); }  // forceSync=yes

void World::start_servers() {
  for (int s = 0; s < kServers; ++s) {
    const auto gen = servers_[static_cast<std::size_t>(s)].gen;
    at_local(s, static_cast<Micros>(rng_.below(100 * kMs)), [this, s, gen] { try_join(s, gen); });
  }
}

// Stops following or leading (Learner.shutdown, Leader.shutdown): every
// client connection is closed, the peers' connections too; the log stays.
void World::go_looking(int s, const std::string& why) {
  Server& sv = servers_[static_cast<std::size_t>(s)];
  trace("s" + std::to_string(s) + " looking: " + why);
  const Role was = sv.role;
  sv.role = Role::looking;
  ++sv.gen;
  for (const auto& [c, session] : std::map<int, std::uint64_t>(sv.clients)) close_client(s, c, false);
  sv.clients.clear();
  sv.waiting.clear();
  sv.fifo.clear();
  sv.data_watches.clear();
  sv.child_watches.clear();
  sv.touches.clear();
  if (was == Role::following) {
    const int l = sv.leader;
    send_close(s, l, [this, l, s] { on_member_closed(l, s); });
    reset_view(s, l);
  } else if (was == Role::leading) {
    for (const auto& [f, heard] : sv.followers) {
      const int ff = f;
      send_close(s, ff, [this, ff, s] { on_member_closed(ff, s); });
      reset_view(s, ff);
    }
  }
  sv.leader = -1;
  sv.followers.clear();
  sv.acks.clear();
  sv.tracker.clear();
  sv.syncs.clear();
  const auto gen = sv.gen;
  at_local(s, 50 * kMs + static_cast<Micros>(rng_.below(350 * kMs)), [this, s, gen] { try_join(s, gen); });
}

void World::on_member_closed(int s, int peer) {
  Server& sv = servers_[static_cast<std::size_t>(s)];
  if (sv.role == Role::leading) {
    sv.followers.erase(peer);  // the LearnerHandler ends; syncLimit's check counts the rest
  } else if (sv.role == Role::following && sv.leader == peer) {
    go_looking(s, "leader closed the connection");
  }
}

void World::try_join(int s, std::uint64_t gen) {
  Server& sv = servers_[static_cast<std::size_t>(s)];
  if (sv.gen != gen || sv.role != Role::looking) return;
  auto up = [this](int p) { return paused_until_[static_cast<std::size_t>(p)] <= now_; };
  // A leader we can reach, of an epoch we have not left, takes us on.
  for (int p = 0; p < kServers; ++p) {
    const Server& l = servers_[static_cast<std::size_t>(p)];
    if (p != s && l.role == Role::leading && up(p) && reachable(s, p) && l.epoch >= sv.epoch) {
      follow(s, p);
      return;
    }
  }
  std::vector<int> q{s};
  for (int p = 0; p < kServers; ++p) {
    if (p != s && servers_[static_cast<std::size_t>(p)].role == Role::looking && up(p) && reachable(s, p)) q.push_back(p);
  }
  if (q.size() == 3 && !reachable(q[1], q[2])) q.pop_back();
  if (q.size() < 2) {
    at_local(s, 200 * kMs, [this, s, gen] { try_join(s, gen); });
    return;
  }
  // FastLeaderElection: the member with the latest history (then the
  // highest id) leads.
  auto last = [this](int p) {
    const auto& log = servers_[static_cast<std::size_t>(p)].log;
    return log.empty() ? 0 : log.back().zxid;
  };
  const int l = *std::max_element(q.begin(), q.end(), [&](int a, int b) {
    return last(a) != last(b) ? last(a) < last(b) : a < b;
  });
  establish(l, q);
}

void World::establish(int l, const std::vector<int>& quorum) {
  Server& L = servers_[static_cast<std::size_t>(l)];
  std::uint32_t epoch = 0;
  for (const auto& sv : servers_) epoch = std::max(epoch, sv.epoch);
  ++res_.c.elections;
  L.role = Role::leading;
  L.leader = l;
  L.epoch = epoch + 1;
  L.counter = 0;
  ++L.gen;
  trace("s" + std::to_string(l) + " leads epoch " + std::to_string(L.epoch));
  // Zab: the new leader's history holds every committed transaction; its
  // whole log commits once the quorum has it (NEWLEADER).
  std::set<std::uint64_t> in_log;
  for (const auto& t : L.log) in_log.insert(t.zxid);
  for (const auto z : committed_) {
    if (!in_log.count(z)) fail("model: the elected leader lacks committed zxid " + std::to_string(z));
  }
  for (const auto& t : L.log) {
    if (committed_.insert(t.zxid).second && t.kind == TxnKind::close_session) check_close(t.session);
  }
  apply(l, L.log.size(), false);
  // SessionTrackerImpl's constructor: every session starts afresh.
  for (const auto session : L.sessions) L.tracker[session] = {round_up(local(l) + cfg_.timeout), false, -1};
  for (const int f : quorum) {
    if (f != l) follow(f, l);
  }
  const auto gen = L.gen;
  leader_loop(l, gen);
  at_local(l, cfg_.tick - local(l) % cfg_.tick, [this, l, gen] { expiry_loop(l, gen); });
}

void World::follow(int f, int l) {
  Server& F = servers_[static_cast<std::size_t>(f)];
  Server& L = servers_[static_cast<std::size_t>(l)];
  connect_link(f, l);
  F.role = Role::following;
  F.leader = l;
  F.epoch = L.epoch;
  ++F.gen;
  // Synced to the leader's history (DIFF/TRUNC/SNAP): the db is rebuilt.
  F.log = L.log;
  F.applied = 0;
  reset_db(F);
  apply(f, L.applied, false);
  F.last_from_leader = local(f);
  L.followers[f] = local(l);
  for (std::size_t i = L.applied; i < L.log.size(); ++i) {
    const auto z = L.log[i].zxid;
    const auto gen = F.gen;
    at_local(f, fsync_delay(), [this, f, l, z, gen] {
      if (servers_[static_cast<std::size_t>(f)].gen == gen) send(f, l, [this, l, f, z] { on_ack(l, f, z); });
    });
  }
  const auto gen = F.gen;
  at_local(f, cfg_.tick / 2, [this, f, gen] { follower_check(f, gen); });
  trace("s" + std::to_string(f) + " follows s" + std::to_string(l));
}

void World::ping_followers(int l) {
  for (const auto& [f, heard] : servers_[static_cast<std::size_t>(l)].followers) {
    const int ff = f;
    send(l, ff, [this, ff, l] { on_ping(ff, l); });
  }
}

// Leader.lead's loop: every tickTime/2 (plus its own scheduling, up to a
// quarter tick: the proof allows 0.75 x tickTime), the syncLimit check, then
// a ping to every learner.
void World::leader_loop(int l, std::uint64_t gen) {
  Server& L = servers_[static_cast<std::size_t>(l)];
  if (L.gen != gen || L.role != Role::leading) return;
  int synced = 1;
  for (auto it = L.followers.begin(); it != L.followers.end();) {
    if (local(l) - it->second <= cfg_.sync_limit * cfg_.tick) {
      ++synced;
      ++it;
      continue;
    }
    // The LearnerHandler's read timeout (syncLimit x tickTime) closes it.
    const int f = it->first;
    it = L.followers.erase(it);
    send_close(l, f, [this, f, l] { on_member_closed(f, l); });
    reset_view(l, f);
  }
  if (synced < 2) {
    go_looking(l, "not sufficient followers synced");
    return;
  }
  ping_followers(l);
  at_local(l, cfg_.tick / 2 + static_cast<Micros>(rng_.below(static_cast<std::uint64_t>(cfg_.tick / 4))),
           [this, l, gen] { leader_loop(l, gen); });
}

// The follower's socket read timeout: syncLimit x tickTime.
void World::follower_check(int f, std::uint64_t gen) {
  Server& F = servers_[static_cast<std::size_t>(f)];
  if (F.gen != gen || F.role != Role::following) return;
  if (local(f) - F.last_from_leader > cfg_.sync_limit * cfg_.tick) {
    go_looking(f, "read timeout on the leader");
    return;
  }
  at_local(f, cfg_.tick / 2, [this, f, gen] { follower_check(f, gen); });
}

// SessionTrackerImpl.run: at each tick, the sessions past their deadline are
// polled off the expiry queue (ExpiryQueue.poll); each is then marked closing
// (setSessionClosing) and its closeSession proposed (expirer.expire). 3.8.0
// takes the two steps one after the other, outside the tracker's lock; the
// stall between them is drawn per session, at most Config::expiry_stall.
void World::expiry_loop(int l, std::uint64_t gen) {
  Server& L = servers_[static_cast<std::size_t>(l)];
  if (L.gen != gen || L.role != Role::leading) return;
  std::vector<std::uint64_t> now_closing;
  for (auto& [session, t] : L.tracker) {
    if (t.polled || t.closing || t.deadline > local(l)) continue;
    t.polled = true;
    const auto max = static_cast<std::uint64_t>(cfg_.expiry_stall);
    // A third of the polls mark at once, a third after the longest stall.
    const auto pick = max == 0 ? 0 : stall_rng_.below(3);
    const Micros stall = pick == 0 ? 0 : pick == 1 ? static_cast<Micros>(stall_rng_.below(max + 1)) : cfg_.expiry_stall;
    if (stall == 0) {
      now_closing.push_back(session);
      continue;
    }
    trace("s" + std::to_string(l) + " polls session " + std::to_string(session) + "; marks it closing in " +
          std::to_string(stall / kMs) + "." + std::to_string(stall % kMs / 100) + " ms");
    at_real(l, now_ + stall, [this, l, gen, session = session] {
      if (servers_[static_cast<std::size_t>(l)].gen == gen) mark_closing(l, session);
    });
  }
  for (const auto session : now_closing) mark_closing(l, session);
  at_local(l, cfg_.tick - local(l) % cfg_.tick, [this, l, gen] { expiry_loop(l, gen); });
}

void World::mark_closing(int l, std::uint64_t session) {
  Server& L = servers_[static_cast<std::size_t>(l)];
  const auto it = L.tracker.find(session);
  if (L.role != Role::leading || it == L.tracker.end() || it->second.closing) return;
  it->second.closing = true;
  ++res_.c.expiries;
  trace("s" + std::to_string(l) + " expires session " + std::to_string(session));
  propose(l, Txn{0, TxnKind::close_session, session, -1, 0});
}

void World::leader_touch(int l, std::uint64_t session) {
  auto& tr = servers_[static_cast<std::size_t>(l)].tracker;
  const auto it = tr.find(session);
  if (it != tr.end() && !it->second.closing) it->second.deadline = std::max(it->second.deadline, round_up(local(l) + cfg_.timeout));
}

void World::propose(int l, Txn t) {
  Server& L = servers_[static_cast<std::size_t>(l)];
  t.zxid = (static_cast<std::uint64_t>(L.epoch) << 32) | ++L.counter;
  L.log.push_back(t);
  L.acks[t.zxid];
  const auto gen = L.gen;
  const auto z = t.zxid;
  at_local(l, fsync_delay(), [this, l, z, gen] {
    if (servers_[static_cast<std::size_t>(l)].gen == gen) on_ack(l, l, z);
  });
  for (const auto& [f, heard] : L.followers) {
    const int ff = f;
    send(l, ff, [this, ff, l, t] { on_proposal(ff, l, t); });
  }
}

void World::on_proposal(int f, int l, Txn t) {
  Server& F = servers_[static_cast<std::size_t>(f)];
  if (F.role != Role::following || F.leader != l) return;
  F.last_from_leader = local(f);
  if (!F.log.empty() && F.log.back().zxid >= t.zxid) return;
  F.log.push_back(t);
  const auto gen = F.gen;
  const auto z = t.zxid;
  at_local(f, fsync_delay(), [this, f, l, z, gen] {
    if (servers_[static_cast<std::size_t>(f)].gen == gen) send(f, l, [this, l, f, z] { on_ack(l, f, z); });
  });
}

void World::on_ack(int l, int f, std::uint64_t zxid) {
  Server& L = servers_[static_cast<std::size_t>(l)];
  if (L.role != Role::leading) return;
  if (f != l) {
    const auto it = L.followers.find(f);
    if (it == L.followers.end()) return;
    it->second = local(l);
  }
  const auto a = L.acks.find(zxid);
  if (a == L.acks.end()) return;
  a->second.insert(f);
  // Commits go in zxid order, each once a quorum (2 of 3) logged it.
  while (L.applied < L.log.size()) {
    const auto z = L.log[L.applied].zxid;
    const auto it = L.acks.find(z);
    if (it == L.acks.end() || it->second.size() < 2) break;
    L.acks.erase(it);
    ++res_.c.commits;
    const Txn& t = L.log[L.applied];
    if (committed_.insert(z).second && t.kind == TxnKind::close_session) check_close(t.session);
    apply(l, L.applied + 1, true);
    for (const auto& [ff, heard] : L.followers) {
      const int fo = ff;
      send(l, fo, [this, fo, z] { on_commit(fo, z); });
    }
  }
  // Syncs waiting for the proposals outstanding when they came.
  auto& syncs = L.syncs;
  const auto last_applied = L.applied == 0 ? 0 : L.log[L.applied - 1].zxid;
  for (auto it = syncs.begin(); it != syncs.end();) {
    if (it->first <= last_applied) {
      const auto [origin, req] = it->second;
      if (origin == l) answer_at(l, req, Answer{});
      else send(l, origin, [this, origin, req] { answer_at(origin, req, Answer{}); });
      it = syncs.erase(it);
    } else {
      ++it;
    }
  }
}

void World::on_commit(int f, std::uint64_t zxid) {
  Server& F = servers_[static_cast<std::size_t>(f)];
  if (F.role != Role::following) return;
  F.last_from_leader = local(f);
  for (std::size_t i = F.applied; i < F.log.size(); ++i) {
    if (F.log[i].zxid == zxid) {
      apply(f, i + 1, true);
      return;
    }
  }
}

void World::on_ping(int f, int l) {
  Server& F = servers_[static_cast<std::size_t>(f)];
  if (F.role != Role::following || F.leader != l) return;
  F.last_from_leader = local(f);
  // Learner.ping: the reply carries the touch table (getTouchSnapshot).
  auto touches = std::move(F.touches);
  F.touches.clear();
  send(f, l, [this, l, f, touches = std::move(touches)] { on_ping_reply(l, f, touches); });
}

void World::on_ping_reply(int l, int f, std::set<std::uint64_t> touches) {
  Server& L = servers_[static_cast<std::size_t>(l)];
  if (L.role != Role::leading) return;
  const auto it = L.followers.find(f);
  if (it == L.followers.end()) return;
  it->second = local(l);
  for (const auto session : touches) leader_touch(l, session);
}

}  // namespace zklock::ensim
