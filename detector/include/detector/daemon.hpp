// Daemon: the detector's loop — mirror, scan, choose, revoke, report.
//
// Each scan analyses the mirror's snapshot (no ZooKeeper reads), finds the
// cycles among waits older than min_wait, picks a victim per cycle by policy
// and, when this replica leads (and not in dry-run), revokes it with one
// checked multi (zklock/protocol/revoke.hpp). A scan runs every `interval`, and
// also at the min-wait deadline of each new lock node the mirror sees (the
// fast path; fast-path scans at least 100 ms apart, so a busy tree costs
// at most ten of them a second), so detection latency is at most min_wait +
// 100 ms + one scan + one round trip after the cycle closes. Each scan also measures how long the
// head of each queue has kept waiters behind it (the oldest is exported as
// zklock_detector_oldest_head_with_waiters_seconds): the detector does not
// act on it, since a long hold and a head that never takes its grant look
// the same. With the HTTP endpoint on, each scan also hands the
// status page (detector/status.hpp) a summary of the same snapshot with no
// min-wait, and, while someone looks at the page, the newest revocation
// records read from ZooKeeper.
//
// Thread-safety: run() on one thread; stop(), metrics() and the accessors
// from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <spdlog/logger.h>

#include "detector/leader.hpp"
#include "detector/metrics.hpp"
#include "detector/mirror.hpp"
#include "detector/policy.hpp"
#include "zklock/client.hpp"
#include "zklock/protocol/revoke.hpp"

namespace zklock::detector {

using Clock = std::chrono::steady_clock;

enum class RevocationMode { wait, all };
std::string_view revocation_mode_name(RevocationMode m) noexcept;  // "wait" / "all"

struct DetectorConfig {
  std::string zk = "127.0.0.1:2181";
  std::string root = "/locks";
  std::chrono::milliseconds interval{1000};
  std::chrono::milliseconds min_wait{1000};
  // Clock-skew allowance past a wait's stated timeout (gives_up_after_ms):
  // beyond it the node is an abandoned wait and closes no cycle
  // (model::abandoned_wait, docs/detector.md "Abandoned waits").
  std::chrono::milliseconds abandon_skew{5000};
  std::chrono::milliseconds session_timeout{10000};
  std::chrono::milliseconds connect_timeout{5000};
  std::chrono::milliseconds resync_interval{60000};
  PolicyOptions policy;
  RevocationMode mode = RevocationMode::wait;
  bool dry_run = false;
  int metrics_port = 0;                 // 0: no HTTP endpoint
  std::string metrics_host = "127.0.0.1";  // the status page shows owners, hosts, pids: local by default
  std::optional<DigestCredentials> credentials;
  std::string id;                       // detector id in records; default "<host>/<pid>"
  std::size_t keep_records = 1000;
  // The leader prunes revocation records to keep_records this often (the
  // first time after min(10 s, prune_interval)).
  std::chrono::milliseconds prune_interval{60000};
  std::size_t max_children = 100'000;
  // The mirror's reads outstanding at once, over all its sessions
  // (MirrorOptions::max_inflight).
  std::size_t mirror_max_inflight = MirrorOptions{}.max_inflight;
  // Sessions the mirror loads and watches through from the start
  // (MirrorOptions::load_sessions).
  std::size_t mirror_load_sessions = MirrorOptions{}.load_sessions;
  // Watched bytes per ZooKeeper session (ClientOptions::watch_budget_bytes):
  // the mirror opens more sessions rather than exceed it.
  std::size_t watch_budget_bytes = ClientOptions{}.watch_budget_bytes;
  std::shared_ptr<spdlog::logger> log;  // default: spdlog's default logger
};

// What one scan did about one cycle.
struct CycleReport {
  model::Cycle cycle;
  std::string text;              // cycle_text(cycle)
  Candidate victim;
  std::string outcome;           // revoked, aborted, deposed, failed, dry_run, standby
  std::string detail;
  double latency_seconds = 0;    // youngest cycle node's creation -> detection
  bool first_seen = false;       // not reported by the previous scan
};

class Daemon {
 public:
  // Connects to ZooKeeper (throws Error, e.g. connect_timeout) and starts
  // mirroring, the election and the metrics endpoint.
  explicit Daemon(DetectorConfig config);
  ~Daemon();  // leaves the election (deletes the leader node)
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Loops until stop(). Returns normally.
  void run();
  void stop();

  // One scan now (also what run() does). For tests and tools.
  std::vector<CycleReport> scan_once();

  const Metrics& metrics() const noexcept { return metrics_; }
  bool is_leader() const { return election_->is_leader(); }
  LeaderElection& election() { return *election_; }
  Mirror& mirror() { return *mirror_; }
  Client& client() { return *client_; }
  int metrics_port() const { return server_ ? server_->port() : 0; }
  // /healthz answers 503 once no ZooKeeper request of this detector has
  // succeeded for longer than this: 3 × the scan interval, at least 5 s
  // (docs/detector.md, "Health"). run() sends one probe (an exists() of the
  // root) per scan interval, so a healthy detector's latest answer is at
  // most about one interval old.
  std::chrono::milliseconds health_bound() const;
  // "" when healthy, else why not: what /healthz answers.
  std::string health() const;
  const DetectorConfig& config() const noexcept { return config_; }

  // Called for every cycle of every scan, on the run() thread. Set before run().
  std::function<void(const CycleReport&)> on_cycle;
  // Fault injection for tests: runs between the snapshot and the revocation
  // multi of each cycle (to change the tree behind the detector's back).
  std::function<void(const model::Cycle&)> before_revoke;

 private:
  void schedule(Clock::time_point due);
  CycleReport handle_cycle(const model::Cycle& cycle, const model::WaitAnalysis& analysis, std::int64_t now_ms,
                           const std::optional<std::string>& leader_node);
  void probe();
  void update_status(const model::QueueSnapshot& snapshot, std::int64_t now_ms);
  void read_revocations();

  DetectorConfig config_;
  std::shared_ptr<spdlog::logger> log_;
  Metrics metrics_;
  std::unique_ptr<Client> client_;
  std::unique_ptr<Mirror> mirror_;
  std::unique_ptr<LeaderElection> election_;
  std::unique_ptr<StatusBoard> status_;  // with the HTTP endpoint only
  std::unique_ptr<MetricsServer> server_;
  // Revocation records by znode name, read while the page is looked at
  // (run() thread only).
  std::map<std::string, StatusRevocation> revocations_;
  bool revocations_read_ = false;

  std::mutex mu_;
  std::condition_variable cv_;
  bool stopping_ = false;                       // GUARDED_BY(mu_)
  std::multiset<Clock::time_point> due_;        // GUARDED_BY(mu_): fast-path scan deadlines
  std::map<std::string, std::uint64_t> previous_cycles_;  // run() thread only: cycle key -> consecutive scans seen
  // Nodes this replica revoked that the mirror still shows: cycles through
  // them are stale views of an already broken cycle (run() thread only).
  std::set<std::string> revoked_nodes_;
  // The head of each lock with waiters at the last scan, and since when (ms
  // since the epoch) it has kept them waiting as far as this replica knows:
  // QueueHead::since_ms(), or the previous scan's time when the head changed
  // since then (a node that reached the head between two scans got there
  // after the earlier one). run() thread only.
  struct HeadSeen {
    std::string node;
    std::int64_t since_ms = 0;
  };
  std::map<std::string, HeadSeen> heads_;
  std::int64_t last_scan_ms_ = 0;
  // The status page's data is rebuilt at most twice an interval: a scan
  // runs on every new node's deadline, and the page's own analysis (every
  // wait, however young) costs as much as the scan.
  Clock::time_point status_at_{};  // steady: a wall clock set back must not freeze the page
  // When a ZooKeeper request of this detector last succeeded (Clock), and
  // whether a probe is in flight (at most one).
  std::atomic<Clock::rep> last_answer_{Clock::now().time_since_epoch().count()};
  std::atomic<bool> probing_{false};
};

}  // namespace zklock::detector
