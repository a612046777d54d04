// The validity bound: committed writes as evidence, the heartbeat write, and the bound's lapse.
#include <algorithm>
#include <exception>
#include <functional>
#include <memory>
#include <optional>

#include "async_op.hpp"
#include "client_impl.hpp"

namespace zklock {
namespace {
// The heartbeat's node. zklock never creates it: a setData on it is answered
// ZNONODE, an error transaction that the leader proposes and a quorum
// commits like any write (PrepRequestProcessor.pRequest2Txn throws
// NoNodeException after setting the header), and that changes no data.
// Should someone create it, the impossible version makes the answer
// ZBADVERSION, committed the same way; a restrictive ACL on it would answer
// ZNOAUTH, which never counts: the bound would lapse, never overshoot.
constexpr const char* kHeartbeatPath = "/zklock/heartbeat";

// The heartbeat at the rule's own pace, for a bound that has passed: grants
// wait for it (lock_machine.hpp, invariant 9), typically right after a
// reconnect, when the evidence starts over on the new connection. At one
// write per period the chain i, j, k of validity_rule.hpp takes two periods
// (j a period after i, k a period after j); the rule itself asks only that j
// leave a ping gap after i's answer and k after j's answer, so here i goes at
// once, j a ping gap after i's answer, k at j's answer: a ping gap and three
// round trips. Each answer's time is taken in its callback, after the rule
// noted it (async_op.hpp), so the gap the rule measures is at least `gap`.
// Three writes per lapse; the periodic heartbeat takes over once the bound
// is ahead again, and whenever a write is not committed (connection lost:
// the reconnect starts a new chain) or the chain is no longer the live one.
// Holds no reference to itself: each pending step owns it.
struct ProvingChain : std::enable_shared_from_this<ProvingChain> {
  Clock::duration gap;     // ValidityParams::ping_gap
  Clock::duration period;  // the heartbeat period: the pace after a write that did not count
  std::function<bool()> live;                                  // this chain's epoch and generation
  std::function<bool()> settled;  // nothing to prove now: the bound is ahead, or no connection
  std::function<void(std::function<void(bool)>)> send;         // one heartbeat write; committed?
  std::function<void(Clock::time_point, std::function<void()>)> at;  // the timer thread
  std::function<void(Clock::time_point)> resume;               // the periodic heartbeat, from then

  // One write. `prev`: the answer of the chain's write before it, if any.
  void step(std::optional<Clock::time_point> prev) {
    if (!live()) return;
    if (settled()) return resume(Clock::now());
    const auto sent = Clock::now();
    send([self = shared_from_this(), sent, prev](bool committed) {
      const auto answered = Clock::now();
      if (!committed) return self->resume(answered + self->period);
      // This write left a ping gap after the previous answer: it can serve
      // as j, and the next one, sent now, as k.
      const bool was_j = prev && sent >= *prev + self->gap;
      self->at(was_j ? answered : answered + self->gap, [self, answered] { self->step(answered); });
    });
  }
};
}  // namespace

std::chrono::milliseconds Client::Impl::margin() const {
  if (opts.validity_margin > 0ms) return opts.validity_margin;
  std::lock_guard lk(mu_);
  return std::max<std::chrono::milliseconds>(negotiated_ / 10, 20ms);
}

std::chrono::milliseconds Client::Impl::heartbeat_period() const {
  return std::chrono::duration_cast<std::chrono::milliseconds>(Clock::duration(heartbeat_period_.load()));
}

// The validity bound (docs/design.md, "Loss and the validity bound"; the rule
// in validity_rule.hpp). Only writes of ours that a quorum committed count;
// the rule chains three of them on one connection. "The same server" is
// checked as "the same connection" (Handle::connection), which is stricter:
// when the connection changes the evidence starts over, and the bound stays
// where the old evidence put it until a chain on the new connection raises
// it. An answer that arrives after the connection changed (counts differ)
// was not sent on the current one and is no evidence.
void Client::Impl::note_committed(Handle* h, Clock::time_point sent, std::uint64_t connection) {
  const auto answered = Clock::now();
  {
    std::lock_guard lk(bound_mu_);
    if (h->epoch != epoch_.load() || connection != h->connection.load()) return;
    if (validity_refused_ || evidence_epoch_ != h->epoch) return;
    // The bound held so far anchors a chain answered before it passes
    // (validity_rule.hpp); a session without one has none to offer.
    const auto before = valid_until_.load();
    std::optional<Clock::time_point> held;
    if (before != Clock::time_point::min().time_since_epoch().count()) held = Clock::time_point(Clock::duration(before));
    const auto proven = rule_.committed(connection, sent, answered, held);
    if (!proven) return;
    const auto candidate = proven->time_since_epoch().count();
    if (candidate <= before) return;
    // A bound that lapsed is reported before it is raised again (invariant 4).
    report_lapse_locked(h->epoch);
    valid_until_.store(candidate);
    if (before > answered.time_since_epoch().count()) return;  // it was proven already
  }
  // Raised out of the past: grants held back until provable go out now
  // (lock_attempt.cpp). Unlocked: they re-read the bound themselves.
  CallbackScope scope(h->epoch);
  emit(SessionEvent::validity_proven, h->epoch);
}

void Client::Impl::report_lapse_locked(std::uint64_t epoch) {
  const auto vu = valid_until_.load();
  if (closing_ || epoch != epoch_.load() || Clock::now().time_since_epoch().count() < vu) return;
  if (vu == lapse_reported_for_ || vu == Clock::time_point::min().time_since_epoch().count()) return;
  lapse_reported_for_ = vu;
  log->warn("zookeeper session 0x{:x}: validity bound passed {} ms ago without a committed write to raise it",
            session_id(),
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - valid_until()).count());
  CallbackScope scope(epoch);
  emit(SessionEvent::validity_expired, epoch);
  // ClientOptions::observer, on the callback thread: bound_mu_ is held here.
  if (opts.observer) {
    post_user([observer = opts.observer, log = log, id = session_id()] {
      try {
        observer->validity_lapsed(id);
      } catch (const std::exception& e) {
        log->error("lock observer threw: {}", e.what());
      } catch (...) {
        log->error("lock observer threw");
      }
    });
  }
}

// One heartbeat write per period at most, and none while the session's own
// writes keep coming: the heartbeat is due a period after the latest
// committed write of the current connection (ours or the recipes'). Once the
// bound has passed, three writes at the rule's pace instead (ProvingChain).
void Client::Impl::heartbeat(std::uint64_t epoch, std::uint64_t gen) {
  if (closing_ || epoch != epoch_.load() || gen != heartbeat_gen_.load()) return;
  const auto now = Clock::now();
  const auto period = heartbeat_period();
  if (connected()) {
    std::optional<Clock::time_point> latest;
    bool refused = false;
    {
      std::lock_guard lk(bound_mu_);
      latest = rule_.latest_sent();
      refused = validity_refused_;
    }
    if (!refused && valid_until() <= now) {
      Clock::duration gap{};
      {
        std::lock_guard lk(bound_mu_);
        gap = rule_.params().ping_gap();
      }
      auto chain = std::make_shared<ProvingChain>();
      chain->gap = gap;
      chain->period = period;
      chain->live = [this, epoch, gen] {
        return !closing_ && epoch == epoch_.load() && gen == heartbeat_gen_.load();
      };
      chain->settled = [this] { return !connected() || Clock::now() < valid_until(); };
      chain->send = [this, epoch](std::function<void(bool)> done) {
        heartbeat_writes_.fetch_add(1);
        set_data(kHeartbeatPath, std::string(), kImpossibleVersion,
                 [done = std::move(done)](Status s, const Stat&) { done(quorum_committed(s.zk_code())); }, epoch);
      };
      chain->at = [this](Clock::time_point when, std::function<void()> fn) { schedule_at(when, std::move(fn)); };
      chain->resume = [this, epoch, gen](Clock::time_point when) {
        schedule_at(when, [this, epoch, gen] { heartbeat(epoch, gen); });
      };
      chain->step(std::nullopt);
      return;
    }
    if (!refused && latest && *latest > now - period) {
      schedule_at(*latest + period, [this, epoch, gen] { heartbeat(epoch, gen); });
      return;
    }
    if (!refused) {
      heartbeat_writes_.fetch_add(1);
      // Pinned: a heartbeat of this chain proves nothing for a successor session.
      set_data(kHeartbeatPath, std::string(), kImpossibleVersion, [](Status, const Stat&) {}, epoch);
    }
  }
  schedule_at(now + period, [this, epoch, gen] { heartbeat(epoch, gen); });
}

// Watches the bound for the whole session, connected or not: a bound can pass
// with the connection intact (a pause between timeout − margin and timeout,
// or a server that answers but whose leader does not commit). Runs at the
// bound; while the bound stays in the past it looks again every period.
void Client::Impl::check_validity(std::uint64_t epoch) {
  if (closing_ || epoch != epoch_.load()) return;
  Clock::time_point next;
  {
    std::lock_guard lk(bound_mu_);
    report_lapse_locked(epoch);
    const auto vu = valid_until();
    next = Clock::now() < vu ? vu : Clock::now() + heartbeat_period();
  }
  schedule_at(next, [this, epoch] { check_validity(epoch); });
}

}  // namespace zklock
