// The nemesis run's bookkeeping (tests/faults/nemesis_test.cpp): the
// contenders' grants as they report them, the queue as the server shows it
// after each heal, the liveness checks, and the final drain. The judgement
// and the figures are in nemesis_judge.hpp.
#pragma once

#include <signal.h>

#include <algorithm>
#include <cstdio>

#include "nemesis_support.hpp"
#include "zklock/protocol/node_name.hpp"

namespace zklock::stories {

constexpr int kContenders = 5;
constexpr int kTickMs = 500;
constexpr int kSessionMs = 4000;
constexpr int kHoldMs = 150;    // the worker's default hold
constexpr int kRetainMs = 200;  // c2 and c4
// After a heal every contender is granted within two session timeouts (a
// dead session's node ahead expires; a contender's own session may have to
// be found expired and its Client re-created) plus one hold and one retention
// per contender ahead of it.
constexpr std::int64_t kLivenessMs = 2 * kSessionMs + kContenders * (kHoldMs + kRetainMs);
// A head node with waiters whose owner is connected on the node's session:
// granted within a round trip of learning it, then held 150 ms and released.
// When the owner's validity bound passed while it was cut off, the grant
// also waits for the bound's proof on the new connection: the chain (a ping
// gap, 375 ms at this tickTime, and three round trips) and the write that
// confirms it, sent a ping gap after the chain's last answer (validity_bound.cpp,
// the proving chain; validity_rule.hpp, a chain's anchor): two ping gaps and
// four round trips, then the grant's. 2.5 s leaves about 350 ms for each of
// those five round trips on a loaded two-core machine (three JVMs and five
// contenders), and is far below the 10 s stalls of the field bug. (At one
// heartbeat per period the proof alone took two periods, 2 × 806 ms.) Five
// seeds on an idle machine saw 105 to 1,765 ms.
constexpr std::int64_t kHeadLiveMs = 2500;
// Any head node with waiters (its session may be dead: it lasts until the
// session expires, up to one timeout and a tick after the heal).
constexpr std::int64_t kHeadStaleMs = kSessionMs + 2000;

struct FaultRecord {
  std::string kind, target, note;
  int dur_ms = 0;
  std::int64_t start_us = 0, heal_us = 0;
  // The latest first grant after the heal, over the contenders, in ms; -1
  // with worst_contender set: that contender was never granted.
  std::int64_t worst_ms = -1;
  std::string worst_contender;
  bool judged = false;  // await_liveness ran for this heal
};

class Run {
 public:
  explicit Run(NemesisEnsemble& ens) : ens_(ens), lock_(test::unique_lock_path("nemesis")) {}
  ~Run() {
    probe_.reset();
    if (probe_log_ != nullptr) {
      zoo_set_log_stream(nullptr);
      std::fclose(probe_log_);
    }
  }
  Run(const Run&) = delete;
  Run& operator=(const Run&) = delete;

  void fail(const std::string& what) { failures_.push_back(what); }
  const std::vector<std::string>& failures() const { return failures_; }

 protected:
  std::string at(std::int64_t us) const {
    char b[32];
    std::snprintf(b, sizeof b, "+%.3fs", static_cast<double>(us - t0_) / 1e6);
    return b;
  }

  void start_contenders() {
    t0_ = mono_us();
    // The probe's C-client log (a line per fault it notices) goes to a file.
    probe_log_ = std::fopen((dir_ / "probe.zk.log").c_str(), "a");
    if (probe_log_ != nullptr) zoo_set_log_stream(probe_log_);
    probe_.emplace(test::ZkHandle::connect(ens_.direct_connect(), 10000ms));
    for (int i = 0; i < kContenders; ++i) {
      contenders_.push_back(Contender::spawn(i, ens_.proxied_connect(), lock_, kSessionMs,
                                             i % 2 == 1 ? kRetainMs : 0, dir_.path()));
    }
    // Every contender granted once before the first fault.
    const bool started = eventually([&] {
      pump();
      return std::all_of(contenders_.begin(), contenders_.end(), [](auto& c) { return c.last_grant_at > 0; });
    }, 30000ms);
    if (!started) throw StoryError("not every contender was granted within 30 s of starting");
    heal_us_ = mono_us();
  }

  void pump() {
    for (auto& c : contenders_) {
      c.pump([&](Contender& who, const Event& e) { on_event(who, e); });
      if (!draining_ && !who_exited_[c.index] && !c.proc.running()) {
        who_exited_[c.index] = true;
        fail(c.name + " exited during the run: " + c.proc.exit_status().value_or(test::ExitStatus{}).describe());
      }
    }
  }
  void pump_for(milliseconds d, bool poll) {
    const auto until = test::Clock::now() + d;
    while (test::Clock::now() < until) {
      pump();
      if (poll) poll_queue();
      ::usleep(5000);
    }
  }

  int holder() const {
    int best = -1;
    for (auto& c : contenders_) {
      if (c.holding && (best < 0 || c.last_grant_at > contenders_[best].last_grant_at)) best = c.index;
    }
    return best;
  }

  // Waits until every contender was granted after the heal (at most
  // kLivenessMs, then 20 s more to measure how long a stall lasts). False
  // when one was not granted within kLivenessMs.
  bool await_liveness(FaultRecord& rec) {
    const std::int64_t h = rec.heal_us;
    rec.judged = true;
    auto all = [&] {
      return std::all_of(contenders_.begin(), contenders_.end(), [&](auto& c) { return c.last_grant_at > h; });
    };
    while (!all() && mono_us() < h + (kLivenessMs + 20000) * 1000) {
      pump();
      poll_queue();
      ::usleep(5000);
    }
    std::string late;
    bool never = false;
    for (auto& c : contenders_) {
      std::int64_t first = -1;
      for (auto gi : c.grants) {
        if (grants_[gi].granted_at > h) {
          first = grants_[gi].granted_at;
          break;
        }
      }
      const std::int64_t ms = first < 0 ? -1 : (first - h) / 1000;
      if (ms < 0 || ms > kLivenessMs)
        late += " " + c.name + (ms < 0 ? " (not within " + std::to_string(kLivenessMs + 20000) + " ms)"
                                       : " (" + std::to_string(ms) + " ms)");
      if (never) continue;
      if (ms < 0) never = true;
      if (ms < 0 || ms > rec.worst_ms) {
        rec.worst_ms = ms;
        rec.worst_contender = c.name;
      }
    }
    if (!late.empty())
      fail("liveness: fault #" + std::to_string(faults_.size()) + " (" + rec.kind + " " + rec.target +
           ") healed at " + at(h) + "; not granted within " + std::to_string(kLivenessMs) + " ms:" + late);
    auto rank = [](const FaultRecord& r) { return r.worst_ms < 0 && !r.worst_contender.empty() ? INT64_MAX : r.worst_ms; };
    if (rank(rec) > rank(worst_liveness_)) worst_liveness_ = rec;
    return late.empty();
  }

  // Stops every contender (SIGTERM: release, drop the mutex, stay connected),
  // checks that the lock path is empty with every session still open (d),
  // then lets them exit (SIGUSR1).
  void drain() {
    draining_ = true;
    for (auto& c : contenders_) ::kill(c.proc.pid(), SIGTERM);
    const bool idle = eventually([&] {
      pump();
      return std::all_of(contenders_.begin(), contenders_.end(), [](auto& c) { return c.idle; });
    }, 30000ms);
    if (!idle) fail("not every contender went idle within 30 s of SIGTERM");
    std::vector<std::string> kids;
    const bool empty = eventually([&] {
      kids.clear();
      const int rc = probe_->children(lock_, &kids);
      return rc == ZNONODE || (rc == ZOK && kids.empty());
    }, 5000ms);
    if (!empty) {
      std::string names;
      for (auto& k : kids) names += " " + k;
      fail("(d) nodes outlived their attempts (every contender idle, sessions open):" + names);
    }
    for (auto& c : contenders_) ::kill(c.proc.pid(), SIGUSR1);
    for (auto& c : contenders_) {
      auto st = c.proc.wait_exit(15000ms);
      if (!st || !st->exited() || st->exit_code() != 0)
        fail(c.name + " did not exit cleanly: " + (st ? st->describe() : "still running"));
    }
    pump();
  }

  NemesisEnsemble& ens_;
  const std::string lock_;
  TempDir dir_;
  std::int64_t t0_ = 0, heal_us_ = 0;
  std::vector<Contender> contenders_;
  std::vector<Grant> grants_;
  std::vector<FaultRecord> faults_;
  FaultRecord worst_liveness_;
  std::int64_t worst_head_live_ms_ = 0, worst_head_any_ms_ = 0;
  std::string queue_log_;
  std::vector<std::string> failures_;

 private:
  void on_event(Contender& c, const Event& e) {
    if (e.kind == "granted") {
      Grant g;
      g.contender = c.index;
      g.czxid = std::strtoll(e.get("czxid").c_str(), nullptr, 10);
      g.granted_at = e.t_us;
      g.valid_at_grant = e.get("valid") == "1";
      c.grants.push_back(grants_.size());
      grants_.push_back(g);
      c.holding = true;
      c.last_grant_at = e.t_us;
    } else if (e.kind == "released" && !c.grants.empty()) {
      Grant& g = grants_[c.grants.back()];
      auto num = [&](const char* k) { return std::strtoll(e.get(k).c_str(), nullptr, 10); };
      g.released = true;
      g.first_valid = num("first_valid");
      g.last_valid = num("last_valid");
      g.first_invalid = num("first_invalid");
      g.rel_start = num("rel_start");
      g.revalid = e.get("revalid") == "1";
      c.holding = false;
    }
  }

  // One listing every 100 ms: tracks the head node while others wait (see
  // kHeadLiveMs, kHeadStaleMs), from the last heal on.
  void poll_queue() {
    const std::int64_t now = mono_us();
    if (now - last_poll_ < 100000) return;
    last_poll_ = now;
    std::vector<std::string> kids;
    const int rc = probe_->children(lock_, &kids);
    if (rc != ZOK && rc != ZNONODE) return;
    std::vector<protocol::LockNodeName> nodes;
    for (auto& k : kids) {
      if (auto n = protocol::parse_lock_node_name(k)) nodes.push_back(*n);
    }
    std::sort(nodes.begin(), nodes.end(),
              [](auto& a, auto& b) { return protocol::compare_sequence(a.sequence, b.sequence) < 0; });
    std::string listing;
    for (auto& n : nodes) listing += " " + owner_name(n.owner_key) + ":" + std::to_string(n.sequence);
    if (listing != last_listing_) queue_log_ += at(now) + listing + "\n";
    last_listing_ = listing;
    if (nodes.size() < 2) {
      head_.clear();
      return;
    }
    if (nodes[0].name != head_) {
      ::Stat st{};
      if (probe_->exists(lock_ + "/" + nodes[0].name, &st) != ZOK) return;
      head_ = nodes[0].name;
      head_since_ = now;
      head_session_ = st.ephemeralOwner;
      head_flagged_live_ = head_flagged_any_ = false;
    }
    const std::int64_t from = std::max(head_since_, heal_us_);
    const std::int64_t age = (now - from) / 1000;
    worst_head_any_ms_ = std::max(worst_head_any_ms_, age);
    const std::string owner = owner_name(nodes[0].owner_key);
    if (age > kHeadStaleMs && !head_flagged_any_) {
      head_flagged_any_ = true;
      fail("head stays: " + owner + "'s node " + head_ + " the head with " + std::to_string(nodes.size() - 1) +
           " waiting for " + std::to_string(age) + " ms after " + at(from));
    }
    for (auto& c : contenders_) {
      if (c.name != owner || !c.connected || c.session != hex(head_session_)) continue;
      const std::int64_t live = (now - std::max(from, c.connected_since)) / 1000;
      worst_head_live_ms_ = std::max(worst_head_live_ms_, live);
      if (live > kHeadLiveMs && !head_flagged_live_) {
        head_flagged_live_ = true;
        fail("head not taking the lock: " + owner + "'s node " + head_ + " the head with " +
             std::to_string(nodes.size() - 1) + " waiting for " + std::to_string(live) + " ms while " + owner +
             " was connected on its session " + c.session + " (since " + at(std::max(from, c.connected_since)) + ")");
      }
    }
  }
  static std::string hex(std::int64_t v) {
    char b[32];
    std::snprintf(b, sizeof b, "0x%llx", static_cast<unsigned long long>(v));
    return b;
  }
  std::string owner_name(const std::string& key) const {
    for (auto& c : contenders_) {
      if (protocol::owner_key(c.name) == key) return c.name;
    }
    return "?" + key;
  }

  // optional: ZkHandle's defaulted constructor cannot be used where its
  // Watch is incomplete.
  std::optional<test::ZkHandle> probe_;
  std::FILE* probe_log_ = nullptr;
  bool draining_ = false;
  bool who_exited_[kContenders] = {};
  std::int64_t last_poll_ = 0, head_since_ = 0, head_session_ = 0;
  std::string head_, last_listing_;
  bool head_flagged_live_ = false, head_flagged_any_ = false;
};

}  // namespace zklock::stories
