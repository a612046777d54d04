// The validity bound: committed writes as evidence, the heartbeat write, and the bound's lapse.
#include <algorithm>
#include <exception>
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
// committed write of the current connection (ours or the recipes').
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
