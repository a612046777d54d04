// Internal: one acquisition of one lock node, from create to release. The
// single recipe core shared by FairMutex, FairSharedMutex and MultiLock.
//
// The state machine runs on the ZooKeeper completion thread and the client's
// timer thread, under `mu_`. It never blocks: every step issues async
// requests and returns. See docs/design.md for the argument behind each step.
//
// Invariants:
//  (1) `done_` runs exactly once: with a Lease when granted, or an error.
//  (2) The hand-off marker (the lock parent's data) is only ever written by
//      a release of a node that was granted, in the same multi that deletes
//      it; abandoned waits delete without it. A marker naming node P thus
//      proves P was a holder.
//  (3) Once `phase_` is terminal (failed/released), no request is issued
//      except deleting our own node, and, when a create's answer was lost
//      (`create_uncertain_`), one listing to find that node by its GUID.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>
#include <unordered_map>
#include <vector>

#include "client_impl.hpp"
#include "zklock/lease.hpp"

namespace zklock::detail {

struct AttemptRequest {
  std::string lock_path;
  Mode mode = Mode::exclusive;
  AcquireOptions options;
  LossPolicy policy = LossPolicy::tolerant;
  std::chrono::milliseconds timeout{0};  // zero: none
  std::stop_token stop;
};

// One child of the lock path, as the recipe sees it.
struct QueueEntry {
  LockNodeName name;
  std::int64_t czxid = 0;  // known only for our node and for tie-broken nodes
};

// A parsed listing of one lock path in sequence order (ties unresolved),
// shared by every attempt one batched get_children served.
struct Listing {
  Status status;
  std::vector<QueueEntry> queue;
  std::unordered_map<std::string, std::size_t> by_guid;
  bool has_ties = false;
};
struct ListingBatch;

class LockAttempt : public std::enable_shared_from_this<LockAttempt> {
 public:
  using Done = std::function<void(AcquireResult)>;

  // Starts the acquisition. `done` runs once on an internal thread; it must
  // not block (the sync wrappers fulfil a promise; acquire_async posts).
  static void start(Client& client, AttemptRequest request, Done done);
  // Blocks the calling thread until `start`'s outcome.
  static AcquireResult run_blocking(Client& client, AttemptRequest request);

  ~LockAttempt();

  // --- the Lease's view ---
  const FencingToken& token() const { return token_; }
  bool valid() const;
  bool suspended() const;
  std::optional<LossReason> loss_reason() const;
  std::string loss_detail() const;
  void on_lost(std::function<void(LossReason, const std::string&)> cb);
  std::stop_token lost_token() const { return lost_source_.get_token(); }
  void release() noexcept;
  void release_async(std::function<void()> done) noexcept;
  const std::string& lock_path() const { return req_.lock_path; }
  const std::string& node_path() const { return node_path_; }
  const std::string& owner() const { return owner_; }
  Mode mode() const { return req_.mode; }

  LockAttempt(Client& client, AttemptRequest request, Done done);

 private:
  enum class Phase { starting, creating, waiting, held, failed, released };

  void begin();
  void ensure_parent_then_create();
  void create_and_list();
  void list_soon(bool with_create);
  static void issue_listing(Client::Impl* impl, std::shared_ptr<ListingBatch> batch, std::string path,
                            std::vector<std::pair<std::weak_ptr<LockAttempt>, std::uint64_t>> waiting);
  void on_created(Status st, const std::string& path, const Stat& stat, std::uint64_t gen);
  void on_listing(std::shared_ptr<const Listing> listing, std::uint64_t gen);
  void order_then_evaluate(std::shared_ptr<const Listing> listing);
  void evaluate(std::shared_ptr<const Listing> listing);
  void watch_blocker(const QueueEntry& blocker);
  void watch_own_node();
  void own_node_gone_locked();
  void on_blocker_gone(const QueueEntry& blocker);
  bool only_blocker_listed(const QueueEntry& blocker) const;
  void check_earlier_candidates();
  void relist();
  void resync();
  void on_own_node_deleted();
  void on_session(SessionEvent ev, std::uint64_t epoch);

  void grant();
  void fail(Error error);
  void abandon(Errc why, std::string message);
  void lose(LossReason reason, std::string detail);
  void delete_own_node(bool with_marker, std::function<void()> then);
  void sweep_uncertain_create();     // failed with a create of unknown outcome: delete it by GUID
  void keep_alive_while_cleaning();  // a failed attempt outlives its cleanup
  void finish_locked();  // unregisters observers, timers, deadlock registry
  bool start_release(std::function<void()> then);

  // --- immutable after construction ---
  Client::Impl* impl_;
  std::shared_ptr<Client::Impl> impl_ref_;
  AttemptRequest req_;
  std::string owner_;
  std::string guid_;
  std::string node_prefix_;  // lock_path + "/" + name prefix
  std::string data_;

  mutable std::mutex mu_;
  Phase phase_ = Phase::starting;            // GUARDED_BY(mu_)
  Done done_;                                // GUARDED_BY(mu_)
  std::uint64_t generation_ = 0;             // bumps on every (re)create; stale replies are dropped
  std::uint64_t epoch_ = 0;                  // session epoch of our node
  bool create_uncertain_ = false;            // a create may have run but its answer was lost
  bool node_exists_ = false;                 // our node was created and not yet deleted by us
  bool deleting_ = false;
  bool retry_marker_ = false;                // a delete lost to a disconnect: retried as asked,
  std::function<void()> retry_then_;         // and whoever waits for it (release()) is told
  bool sweeping_ = false;                    // sweep_uncertain_create's listing is out
  bool keeping_alive_ = false;               // a keep_alive_while_cleaning timer is armed
  bool revoked_ = false;
  int parent_retries_ = 0;
  std::string node_name_;
  std::string node_path_;
  FencingToken token_;
  std::string ensemble_id_;
  std::shared_ptr<const Listing> listing_;    // the last listing we evaluated
  std::size_t self_index_ = 0;                // our place in it: earlier entries are the candidates
  std::string blocker_;                       // name of the node we watch
  std::optional<LossReason> loss_;
  std::string loss_detail_;
  bool suspended_ = false;
  std::vector<std::function<void(LossReason, const std::string&)>> lost_cbs_;
  std::stop_source lost_source_;
  Client::Impl::ObserverId observer_ = 0;
  Client::Impl::TimerId timer_ = 0;
  std::unique_ptr<std::stop_callback<std::function<void()>>> stop_cb_;
  bool registered_ = false;
  // Keeps a pending attempt alive: while waiting, only weak references sit
  // in ZooKeeper's watch table. Cleared when the outcome is delivered.
  std::shared_ptr<LockAttempt> pending_self_;
};

// --- shared by the front ends (FairMutex, FairSharedMutex, MultiLock) ---
// The lease, or the error thrown.
Lease take_lease(AcquireResult result);
// Nullopt for a timeout; otherwise as take_lease.
std::optional<Lease> take_lease_unless_timeout(AcquireResult result);
// Starts an acquisition whose outcome goes to `done` on the client's callback
// thread (the core's own callback runs under its state lock on ZooKeeper's
// thread, where user code must not run).
void start_async(Client& client, AttemptRequest request, AcquireCallback done);

}  // namespace zklock::detail
