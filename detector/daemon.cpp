#include "detector/daemon.hpp"

#include <algorithm>

#include <spdlog/spdlog.h>

#include "zklock/path.hpp"
#include "zklock/protocol/host.hpp"

namespace zklock::detector {
namespace {

std::int64_t wall_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// A cycle's identity across scans: its sorted node paths.
std::string cycle_key(const model::Cycle& c) {
  std::string key;
  for (const auto& p : c.node_paths()) {
    key += p;
    key += '\n';
  }
  return key;
}

}  // namespace

std::string_view revocation_mode_name(RevocationMode m) noexcept { return m == RevocationMode::all ? "all" : "wait"; }

Daemon::Daemon(DetectorConfig config) : config_(std::move(config)) {
  log_ = config_.log ? config_.log : spdlog::default_logger();
  if (config_.id.empty()) config_.id = protocol::host_and_pid();

  ClientOptions co;
  co.connect = config_.zk;
  co.session_timeout = config_.session_timeout;
  co.connect_timeout = config_.connect_timeout;
  co.credentials = config_.credentials;
  co.watch_budget_bytes = config_.watch_budget_bytes;
  client_ = std::make_unique<Client>(co);
  metrics_.set_connected(client_->connected());
  metrics_.set_scan_interval(std::chrono::duration<double>(config_.interval).count());
  metrics_.set_policy(std::string(policy_name(config_.policy.policy)));
  client_->add_listener([this](ConnectionState s) {
    metrics_.set_connected(s == ConnectionState::connected || s == ConnectionState::reconnected);
    metrics_.session_state(state_name(s));
    log_->info("zookeeper: {}", state_name(s));
  });

  MirrorOptions mo;
  mo.root = config_.root;
  mo.max_children = config_.max_children;
  mo.max_inflight = config_.mirror_max_inflight;
  mo.load_sessions = config_.mirror_load_sessions;
  mo.log = log_;
  const auto min_wait = config_.min_wait;
  mo.on_node_added = [this, min_wait](const std::string&, std::int64_t ctime_ms) {
    // Fast path: check again once this node's wait is old enough to count.
    const auto age = std::chrono::milliseconds(std::max<std::int64_t>(0, wall_now_ms() - ctime_ms));
    const auto remaining = age >= min_wait ? std::chrono::milliseconds(0) : min_wait - age;
    schedule(Clock::now() + remaining + std::chrono::milliseconds(20));
  };
  mirror_ = std::make_unique<Mirror>(*client_, mo);

  LeaderOptions lo;
  lo.id = config_.id;
  lo.log = log_;
  lo.on_change = [this](bool leader) { metrics_.set_leader(leader); };
  election_ = std::make_unique<LeaderElection>(*client_, lo);

  if (config_.metrics_port > 0) {
    status_ = std::make_unique<StatusBoard>();
    server_ = std::make_unique<MetricsServer>(metrics_, config_.metrics_host, config_.metrics_port,
                                              [this] { return health(); }, status_.get());
  }
  mirror_->start();
  election_->start();
  log_->info("detector {} started: root {}, interval {} ms, min-wait {} ms, abandon-skew {} ms, policy {}, mode {}{}",
             config_.id, config_.root, config_.interval.count(), config_.min_wait.count(),
             config_.abandon_skew.count(), policy_name(config_.policy.policy), revocation_mode_name(config_.mode),
             config_.dry_run ? ", dry run" : "");
}

Daemon::~Daemon() {
  stop();
  server_.reset();
  if (election_) election_->stop();
  election_.reset();
  mirror_.reset();
  client_.reset();
}

void Daemon::schedule(Clock::time_point due) {
  std::lock_guard lock(mu_);
  due_.insert(due);
  cv_.notify_all();
}

void Daemon::stop() {
  std::lock_guard lock(mu_);
  stopping_ = true;
  cv_.notify_all();
}

void Daemon::run() {
  constexpr auto kFastPathGap = std::chrono::milliseconds(100);
  auto last_scan = Clock::now() - kFastPathGap;
  auto next_tick = Clock::now();
  auto next_resync = Clock::now() + config_.resync_interval;
  auto next_prune = Clock::now() + std::min<std::chrono::milliseconds>(std::chrono::seconds(10), config_.prune_interval);
  for (;;) {
    {
      std::unique_lock lock(mu_);
      // The deadline is recomputed after every wake-up: a fast-path deadline
      // scheduled while we sleep is usually earlier than the one we sleep
      // towards, and must not wait for the next tick.
      // Fast-path scans are at least kFastPathGap apart: on a busy tree
      // (hot locks hand off thousands of times a second, each hand-off a new
      // node with its own deadline) one scan answers every deadline that
      // matured since the last, and a deadline waits at most one gap more.
      for (;;) {
        auto wake = next_tick;
        if (!due_.empty()) wake = std::min(wake, std::max(*due_.begin(), last_scan + kFastPathGap));
        if (stopping_ || Clock::now() >= wake) break;
        cv_.wait_until(lock, wake);
      }
      if (stopping_) break;
      const auto now = Clock::now();
      due_.erase(due_.begin(), due_.upper_bound(now));
    }
    const auto now = Clock::now();
    last_scan = now;
    if (now >= next_resync) {
      mirror_->resync();
      if (!election_->candidate_node()) election_->recheck();
      next_resync = now + config_.resync_interval;
    }
    if (now >= next_tick) probe();  // once per interval: what /healthz measures
    try {
      scan_once();
    } catch (const std::exception& e) {
      log_->error("scan failed: {}", e.what());
    }
    if (now >= next_tick) next_tick = now + config_.interval;
    if (now >= next_prune && election_->is_leader() && !config_.dry_run) {
      next_prune = now + config_.prune_interval;
      try {
        if (const auto n = protocol::prune_revocation_records(*client_, config_.keep_records)) {
          log_->info("pruned {} old revocation records (keeping {})", n, config_.keep_records);
        }
      } catch (const std::exception& e) {
        log_->warn("pruning revocation records failed: {}", e.what());
      }
    }
  }
  log_->info("detector {} stopping", config_.id);
}

std::vector<CycleReport> Daemon::scan_once() {
  const auto started = Clock::now();
  const auto now_ms = wall_now_ms();
  const auto snapshot = mirror_->snapshot();
  model::AnalyzeOptions opts{now_ms, config_.min_wait};
  opts.abandon_skew = config_.abandon_skew;
  opts.waits = model::AnalyzeOptions::Waits::on_cycles;  // the scan needs the cycles only
  const auto analysis = model::analyze_snapshot(snapshot, opts);
  const auto cycles = analysis.graph.cycles();
  const auto leader_node = election_->leader_node();

  std::vector<CycleReport> reports;
  std::map<std::string, std::uint64_t> seen;  // cycle key -> consecutive scans seen, this one included
  std::uint64_t oldest_cycle_scans = 0;
  // analysis.nodes has only contended queues' nodes; a revoked node in a
  // lone queue can be on no cycle, so forgetting it early is harmless.
  std::erase_if(revoked_nodes_, [&](const std::string& p) { return !analysis.nodes.count(p); });
  for (const auto& c : cycles) {
    const auto paths = c.node_paths();
    if (std::any_of(paths.begin(), paths.end(), [&](const std::string& p) { return revoked_nodes_.count(p); })) {
      continue;  // already broken by us; the mirror has not caught up yet
    }
    auto report = handle_cycle(c, analysis, now_ms, leader_node);
    const auto key = cycle_key(c);
    const auto before = previous_cycles_.find(key);
    report.first_seen = before == previous_cycles_.end();
    if (report.first_seen) metrics_.cycle_detected(report.latency_seconds);
    const auto scans = seen[key] = (report.first_seen ? 0 : before->second) + 1;
    oldest_cycle_scans = std::max(oldest_cycle_scans, scans);
    if (on_cycle) on_cycle(report);
    reports.push_back(std::move(report));
  }
  previous_cycles_ = std::move(seen);

  std::map<std::string, HeadSeen> heads;
  std::int64_t oldest_head_ms = 0;
  for (const auto& h : analysis.heads) {
    if (!h.known()) continue;  // a stat not read yet: no age
    auto since = h.since_ms();
    if (const auto prev = heads_.find(h.lock); prev != heads_.end()) {
      since = prev->second.node == h.node ? prev->second.since_ms : std::max(since, last_scan_ms_);
    }
    oldest_head_ms = std::max(oldest_head_ms, now_ms - since);
    heads.emplace(h.lock, HeadSeen{h.node, since});
  }
  heads_ = std::move(heads);
  last_scan_ms_ = now_ms;

  Metrics::ScanFigures f;
  f.locks = analysis.locks;
  f.holders = analysis.holders;
  f.waiters = analysis.waiters;
  f.oldest_wait_seconds = static_cast<double>(analysis.oldest_wait_ms) / 1000.0;
  f.cycles = previous_cycles_.size();
  f.oldest_cycle_scans = oldest_cycle_scans;
  f.oldest_head_with_waiters_seconds = static_cast<double>(oldest_head_ms) / 1000.0;
  f.scan_seconds = std::chrono::duration<double>(Clock::now() - started).count();
  metrics_.record_scan(f, mirror_->stats());
  if (status_ && Clock::now() - status_at_ >= config_.interval / 2) {
    status_at_ = Clock::now();
    try {
      update_status(snapshot, now_ms);
    } catch (const std::exception& e) {
      log_->warn("status page: {}", e.what());
    }
  }
  if (analysis.truncated_waiters) {
    log_->warn("scan: {} waiters in very long queues were left out of the graph", analysis.truncated_waiters);
  }
  return reports;
}

CycleReport Daemon::handle_cycle(const model::Cycle& cycle, const model::WaitAnalysis& analysis, std::int64_t now_ms,
                                 const std::optional<std::string>& leader_node) {
  CycleReport r;
  r.cycle = cycle;
  r.text = model::cycle_text(cycle);
  std::int64_t youngest = 0;
  for (const auto& p : cycle.node_paths()) {
    if (auto it = analysis.nodes.find(p); it != analysis.nodes.end()) youngest = std::max(youngest, it->second.ctime_ms);
  }
  r.latency_seconds = youngest ? static_cast<double>(now_ms - youngest) / 1000.0 : 0.0;
  const auto candidates = cycle_candidates(cycle, analysis);
  r.victim = candidates[choose_victim(candidates, config_.policy)];
  const auto policy = std::string(policy_name(config_.policy.policy));

  if (config_.dry_run) {
    r.outcome = "dry_run";
    if (!previous_cycles_.count(cycle_key(cycle))) metrics_.revocation(policy, r.outcome);
  } else if (!leader_node) {
    r.outcome = "standby";
  } else {
    protocol::RevocationRequest req;
    req.victims.push_back({r.victim.node, r.victim.owner, r.victim.czxid});
    if (config_.mode == RevocationMode::all) {
      if (auto it = analysis.owners.find(r.victim.owner); it != analysis.owners.end()) {
        std::set<std::string> listed{r.victim.node};
        for (const auto& held : it->second.held) {
          const auto n = analysis.nodes.find(held);
          req.victims.push_back({held, r.victim.owner, n != analysis.nodes.end() ? n->second.czxid : 0});
          listed.insert(held);
        }
        // Locks held alone are not in the snapshot: ask the mirror now. A
        // node in both lists (its waiters left since the snapshot) is
        // deleted once; one that vanished since fails the multi, like any
        // change to the cycle, and the next scan looks again.
        for (auto& lone : mirror_->lone_nodes(it->second.owner_key)) {
          if (listed.insert(lone.path).second) req.victims.push_back({lone.path, r.victim.owner, lone.czxid});
        }
      }
    }
    req.checks = cycle.node_paths();
    req.leader_node = leader_node;
    req.record.policy = policy;
    req.record.mode = std::string(revocation_mode_name(config_.mode));
    req.record.detector = config_.id;
    for (const auto& w : cycle.waits) req.record.cycle.push_back({w.waiter, w.lock, w.waiter_node});
    if (before_revoke) before_revoke(cycle);
    const auto result = revoke(*client_, req, config_.session_timeout);
    r.outcome = std::string(protocol::revoke_outcome_name(result.outcome));
    r.detail = result.detail;
    metrics_.revocation(policy, r.outcome);
    if (result.outcome == protocol::RevokeOutcome::deposed) election_->recheck();
    if (result.outcome == protocol::RevokeOutcome::revoked) {
      for (const auto& v : req.victims) revoked_nodes_.insert(v.node);
    }
  }

  const bool quiet = r.outcome == "standby" || (r.outcome == "dry_run" && previous_cycles_.count(cycle_key(cycle)));
  if (!quiet) {
    log_->info("cycle {} | victim {} ({}) by policy {} | outcome {}{}{} | detection latency {:.3f} s", r.text,
               r.victim.owner, r.victim.node, policy, r.outcome, r.detail.empty() ? "" : ": ", r.detail,
               r.latency_seconds);
  }
  return r;
}

void Daemon::update_status(const model::QueueSnapshot& snapshot, std::int64_t now_ms) {
  // Every current wait, however young: the page shows the tree as it is.
  model::AnalyzeOptions opts{now_ms, std::chrono::milliseconds(0)};
  opts.abandon_skew = config_.abandon_skew;
  auto data = build_status(model::analyze_snapshot(snapshot, opts), snapshot.lone_queues, now_ms);
  data.root = config_.root;
  data.detector_id = config_.id;
  data.leader = election_->is_leader();
  data.scan = metrics_.scans();
  data.interval_ms = config_.interval.count();
  data.min_wait_ms = config_.min_wait.count();
  // Records cost ZooKeeper reads: only while someone looks (a minute).
  if (status_->looked_at_since(now_ms, 60'000)) read_revocations();
  data.revocations_read = revocations_read_;
  for (const auto& [_, rv] : revocations_) data.revocations.push_back(rv);
  std::sort(data.revocations.begin(), data.revocations.end(), [](const StatusRevocation& a, const StatusRevocation& b) {
    return a.r.time_ms != b.r.time_ms ? a.r.time_ms > b.r.time_ms : a.record < b.record;
  });
  if (data.revocations.size() > kMaxRevocations) data.revocations.resize(kMaxRevocations);
  status_->update(std::move(data));
}

void Daemon::read_revocations() {
  const std::string dir(protocol::kRevocationsPath);
  const auto names = client_->try_children(dir).value_or(std::vector<std::string>{});  // none yet: empty
  const std::set<std::string> present(names.begin(), names.end());
  std::erase_if(revocations_, [&](const auto& e) { return !present.count(e.first); });
  // A record never changes: read each once. At most 200 a scan, so a first
  // look at a long history does not hold up detection.
  std::size_t reads = 0;
  for (const auto& name : names) {
    if (revocations_.count(name) || reads == 200) continue;
    ++reads;
    Stat stat;
    const auto path = join_path(dir, name);
    const auto bytes = client_->try_get(path, &stat);
    if (!bytes) continue;  // pruned meanwhile
    StatusRevocation rv{path, protocol::decode_revocation_record(*bytes).value_or(protocol::RevocationRecord{})};
    if (rv.r.time_ms == 0) rv.r.time_ms = stat.ctime;
    if (rv.r.victim_node.empty()) rv.r.reason = "(malformed record)";
    revocations_.emplace(name, std::move(rv));
  }
  revocations_read_ = true;
}

}  // namespace zklock::detector
