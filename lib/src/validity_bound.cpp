// The validity bound: heartbeats, the leader-ordered evidence that raises the bound, and its lapse.
#include <algorithm>
#include <iterator>
#include <optional>

#include "async_op.hpp"
#include "client_impl.hpp"

namespace zklock {

std::chrono::milliseconds Client::Impl::margin() const {
  if (opts.validity_margin > 0ms) return opts.validity_margin;
  std::lock_guard lk(mu_);
  return std::max<std::chrono::milliseconds>(negotiated_ / 10, 20ms);
}

std::chrono::milliseconds Client::Impl::heartbeat_period() const {
  return std::max<std::chrono::milliseconds>(negotiated() / 3, 10ms);
}

// The validity bound (docs/design.md, "Loss and the validity bound").
//
// The leader alone expires sessions, a full timeout after the last touch it
// received. Our server touches the session whenever we send it anything and
// hands its touches to the leader in its answer to each leader ping (every
// tickTime/2; tickTime <= timeout/2, so at least once per heartbeat period),
// on the same ordered stream that carries our requests to the leader.
//
// An answer the leader ordered (a write, or the read behind our sync) to a
// request sent at t proves the leader processed it after t without having
// closed the session. Alone, that does not keep the session alive: the touch
// of that request may still sit on our server. But take two such answers from
// the same server, the earlier sent at t1, the later at t2 >= t1 + period.
// The server touched the session for the first (at or after t1) before it
// forwarded the second; a leader ping fell in between, and the touch went to
// the leader ahead of the second request on that stream. The leader received
// the second request, so it received the touch: the session cannot expire
// before t1 + timeout. Hence the bound is t1 + timeout − margin, for the
// latest t1 with a later ordered answer at least a period after it.
//
// "The same server" is checked as "the same connection" (Handle::connection),
// which is stricter. When the connection changes, the old server's touches
// are no evidence about the new stream: the evidence starts over, and the
// bound stays where the old evidence put it until two answers on the new
// connection raise it. An answer that arrives after the connection changed
// (counts differ) was not sent on the current one and is no evidence.
void Client::Impl::note_ordered(Handle* h, Clock::time_point sent, std::uint64_t connection) {
  const auto period = heartbeat_period();
  const auto timeout = negotiated();
  const auto m = margin();
  std::lock_guard lk(bound_mu_);
  if (h->epoch != epoch_.load() || connection != h->connection.load()) return;
  if (connection != evidence_connection_ || evidence_epoch_ != h->epoch) {
    evidence_.clear();
    evidence_connection_ = connection;
    evidence_epoch_ = h->epoch;
  }
  std::optional<Clock::time_point> base;  // latest evidence a period before `sent`
  for (const auto t : evidence_) {
    if (t <= sent - period) base = t;
  }
  // Kept at least period/16 apart: an answer that close to one we keep would
  // raise a later bound by no more than that. Without the spacing a busy
  // session's newest 64 answers all fell within one period, none was old
  // enough to be a base, and the bound lapsed under load (and leases with it).
  const auto spacing = std::max<std::chrono::milliseconds>(period / 16, 1ms);
  const auto at = std::upper_bound(evidence_.begin(), evidence_.end(), sent);
  const bool crowded = (at != evidence_.begin() && sent - *std::prev(at) < spacing) ||
                       (at != evidence_.end() && *at - sent < spacing);
  if (!crowded) evidence_.insert(at, sent);
  // Older evidence than `base` can never be the latest again. 64 entries
  // spaced so span four periods.
  while (base && evidence_.front() < *base) evidence_.pop_front();
  while (evidence_.size() > 64) evidence_.pop_front();
  if (!base) return;
  const auto candidate = (*base + timeout - m).time_since_epoch().count();
  if (candidate <= valid_until_.load()) return;
  // A bound that lapsed is reported before it is raised again (invariant 4).
  report_lapse_locked(h->epoch);
  valid_until_.store(candidate);
}

void Client::Impl::report_lapse_locked(std::uint64_t epoch) {
  const auto vu = valid_until_.load();
  if (closing_ || epoch != epoch_.load() || Clock::now().time_since_epoch().count() < vu) return;
  if (vu == lapse_reported_for_ || vu == Clock::time_point::min().time_since_epoch().count()) return;
  lapse_reported_for_ = vu;
  log->warn("zookeeper session 0x{:x}: validity bound passed {} ms ago without a leader-ordered answer",
            session_id(),
            std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - valid_until()).count());
  CallbackScope scope(epoch);
  emit(SessionEvent::validity_expired, epoch);
}

void Client::Impl::heartbeat(std::uint64_t epoch, std::uint64_t gen) {
  if (closing_ || epoch != epoch_.load() || gen != heartbeat_gen_.load()) return;
  if (connected()) {
    // One round trip: the read is pipelined behind the sync (sync_then_read).
    sync_then_read([](bool) {});
  }
  schedule_at(Clock::now() + heartbeat_period(), [this, epoch, gen] { heartbeat(epoch, gen); });
}

// Watches the bound for the whole session, connected or not: a bound can pass
// with the connection intact (a pause between timeout − margin and timeout,
// or a server that answers but whose leader does not). Runs at the bound;
// while the bound stays in the past it looks again every heartbeat period.
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

namespace {
// The heartbeat's two requests share this: the read counts only when the sync
// before it was answered.
struct HeartbeatState {
  bool sync_ok = false;
  std::function<void(bool)> done;
  void fail() {  // at most once: the request not answered, or not sent
    if (auto d = std::exchange(done, nullptr)) d(false);
  }
};
using HeartbeatCtx = OpCtx<std::shared_ptr<HeartbeatState>>;

void sync_answered(int rc, const char*, const void* d) noexcept {
  auto c = begin_completion<HeartbeatCtx>(d, rc, false);
  c->done->sync_ok = rc == ZOK;
}

// A heartbeat request that will not be answered: the heartbeat fails.
void fail_heartbeat(HeartbeatCtx& c, int) { c.done->fail(); }

void read_answered(int rc, const ::Stat*, const void* d) noexcept {
  auto c = begin_completion<HeartbeatCtx>(d, rc, false);
  const bool ordered = c->done->sync_ok && server_answered(rc);
  if (ordered) c->impl->note_ordered(c->h, c->sent, c->connection);
  CallbackScope scope(c->h->epoch);
  if (auto done = std::exchange(c->done->done, nullptr)) call_safely(c->impl, [&] { done(ordered); });
}
}  // namespace

// sync makes the server we are connected to catch up with the leader: the
// leader orders the sync after every transaction it committed before, and the
// server answers it only after applying them, then answers the read queued
// behind it in our session. So the read's answer proves that the leader
// processed our sync after `sent` and had not yet closed our session. Both
// requests go out in one issue(): on one handle, at one connection count.
void Client::Impl::sync_then_read(std::function<void(bool)> done) {
  auto state = std::make_shared<HeartbeatState>();
  state->done = std::move(done);
  const int issued = issue([&](zhandle_t* zh, Handle* h) -> int {
    const auto sent = Clock::now();
    const auto connection = h->connection.load();
    auto* sync = new HeartbeatCtx{{this, h, sent, nullptr, connection}, state};
    int rc = send_tracked<fail_heartbeat>(h, sync,
                                          [zh](HeartbeatCtx* c) { return zoo_async(zh, "/", sync_answered, c); });
    if (rc != ZOK) {
      delete sync;
      return rc;
    }
    auto* read = new HeartbeatCtx{{this, h, sent, nullptr, connection}, state};
    rc = send_tracked<fail_heartbeat>(h, read,
                                      [zh](HeartbeatCtx* c) { return zoo_aexists(zh, "/", 0, read_answered, c); });
    if (rc != ZOK) {
      // The sync went out; its completion runs, and the read never will.
      delete read;
      state->done = nullptr;
    }
    return static_cast<int>(ZOK);
  });
  if (issued != ZOK) {
    defer([state, ep = epoch()] {
      CallbackScope scope(ep);
      state->fail();
    });
  }
}

}  // namespace zklock
