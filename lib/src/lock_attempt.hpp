// Internal: LockAttempt, the shell that runs one acquisition of one lock node on the C client.
//
// The shell around the recipe's pure state machine (lock_machine.hpp),
// shared by FairMutex, FairSharedMutex and MultiLock. It turns C-client
// answers, watch notifications, session events, timeouts and the user's
// release into MachineEvents, each stamped with the clock's verdict on the
// validity bound and, for a release, with the owner's (invariant 6); and it
// executes the MachineCommands that come back (requests to send, outcomes
// to report). Whether a lease is handed out, kept idle or re-taken is the
// machine's decision; no branch here makes it.
//
// Files: lock_attempt.cpp (start, feed, outcomes, the end), _io (requests
// out, answers and watches in), _lease (the Lease's calls, release),
// _retain (the slot, the re-take), _watchdog (the waiting watchdog's timer),
// _observe (ClientOptions::observer). A request's owner: lock_front.cpp;
// per-client tables: attempt_tables.hpp (owner_table.hpp, lock_history.hpp).
//
// Threads: events arrive on the ZooKeeper completion thread, the client's
// timer thread and user threads; each is fed to the machine under `mu_`, and
// its commands are executed under `mu_` too. Requests never complete inline
// (a request that cannot be sent is failed from the timer thread), so
// issuing them under `mu_` is safe. Outcomes reach user code only through
// the client's callback thread (start_async, on_lost) or a promise.
//
// Invariants:
//  (1) `done_` runs exactly once: with a Lease when granted, or an error.
//  (2) Requests go out only on the session the attempt started on (`epoch_`):
//      each is pinned to it (Client::Impl::issue), so one racing the
//      session's replacement is refused, not sent on the successor; the
//      machine is then told the session is over. That session is one of
//      the Client's (`seat_`: the first with room for the attempt's
//      watches, session_pool.hpp); a re-take stays on its node's.
//  (3) While the machine is not finished() after its outcome (a node of ours
//      may remain), the client's timer thread keeps the attempt alive.
//  (4) Retained leases: one attempt serves every grant of its node (the
//      first, then each re-take); `grant_` numbers them and a Lease acts only
//      on its own grant, on_lost callbacks included (a release drops them).
//      An idle retained attempt is owned by its mutex's RetainSlot; its
//      retain timer holds only a weak reference.
//  (5) A re-take is decided inside the caller's call: granted locally (no
//      request, no timer, no thread hop before `done`) or void, and then a
//      normal acquisition with the request's whole timeout (`fallback_`,
//      set only during that call).
//  (6) An owner with an acquisition under way in this client has no idle
//      retained node in it (owner_table.hpp): each non-re-take start ends
//      the owner's idle retentions before its create is sent, and a release
//      during one tells the machine it may not retain (may_retain). Its node
//      in a queue is thus never a wait-for edge towards a node of its own
//      that nobody holds (docs/detector.md, "Idle retained nodes").
//  (7) `done_` gets a Lease only from the machine's `granted`, which it
//      reports only in a step whose event says the bound covers it
//      (lock_machine.hpp, invariant 9): valid() is true when the caller gets
//      it. The request's timer still runs while the grant waits for its
//      proof; its cancel then fails the attempt and the machine releases.
#pragma once

#include <atomic>
#include <chrono>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <stop_token>
#include <string>
#include <utility>
#include <vector>

#include "client_impl.hpp"
#include "clock.hpp"
#include "lock_machine.hpp"
#include "session_pool.hpp"
#include "zklock/lease.hpp"
#include "zklock/options.hpp"

namespace zklock::detail {

class LockAttempt;

// Test-only: when set, send_locked calls it between its own session check
// and the request, under the attempt's lock, with the attempt's session.
// A test replaces the session there (tests/loss/session_pin_test.cpp); the
// request's pin must then refuse it. Null in production: one load per request.
struct SendHookForTest {
  virtual ~SendHookForTest() = default;
  virtual void before_send(std::uint64_t epoch) = 0;
};
inline std::atomic<SendHookForTest*> g_send_hook_for_test{nullptr};

// Where a mutex keeps its idle retained attempt (at most one). Dropping the
// slot (the last copy of the mutex) ends the retention: the node is deleted
// in the background.
struct RetainSlot {
  std::mutex mu;
  std::shared_ptr<LockAttempt> attempt;  // GUARDED_BY(mu)
  ~RetainSlot();
};

struct AttemptRequest {
  std::string lock_path;
  Mode mode = Mode::exclusive;
  AcquireOptions options;
  LossPolicy policy = LossPolicy::tolerant;
  std::chrono::milliseconds timeout{0};  // zero: none
  std::stop_token stop;
  // Retained leases (exclusive only): zero is off.
  std::chrono::milliseconds retain{0};
  std::weak_ptr<RetainSlot> slot;
};

class LockAttempt : public std::enable_shared_from_this<LockAttempt> {
 public:
  using Done = std::function<void(AcquireResult)>;

  // Starts the acquisition. `done` runs once on an internal thread; it must
  // not block (the sync wrappers fulfil a promise; acquire_async posts).
  static void start(Client& client, AttemptRequest request, Done done);
  // Blocks the calling thread until `start`'s outcome.
  static AcquireResult run_blocking(Client& client, AttemptRequest request);
  // ClientOptions::observer (lock_attempt_observe.cpp). start() with
  // acquire_started now and granted or failed when `done` runs (invariant 1:
  // once, across a void re-take's fallback too); a plain start() without an
  // observer. The entry points (run_blocking, start_async) call this one.
  static void start_observed(Client& client, AttemptRequest request, Done done);
  // Which grant of its attempt's node `lease` is: above 1, a re-take.
  static std::uint64_t grant_of(const Lease& lease) { return lease.grant_; }

  // `seat`: the session the attempt runs on (session_pool.hpp).
  LockAttempt(Client& client, Seat seat, AttemptRequest request, Done done);
  ~LockAttempt();

  // --- the Lease's view; `grant` is the lease's grant number (invariant 4) ---
  std::pair<std::uint64_t, FencingToken> current_grant() const;
  bool valid(std::uint64_t grant) const;
  bool suspended(std::uint64_t grant) const;
  std::optional<LossReason> loss_reason(std::uint64_t grant) const;
  std::string loss_detail(std::uint64_t grant) const;
  void on_lost(std::uint64_t grant, std::function<void(LossReason, const std::string&)> cb);
  std::stop_token lost_token(std::uint64_t grant) const;
  void release(std::uint64_t grant) noexcept;
  void release_async(std::uint64_t grant, std::function<void()> done) noexcept;
  const std::string& lock_path() const { return req_.lock_path; }
  const std::string& node_path() const { return node_path_; }
  const std::string& owner() const { return owner_; }
  Mode mode() const { return req_.mode; }

  // Feeds one event to the machine and executes its commands (takes mu_).
  void feed(MachineEvent ev);
  void note_blocker_watch(std::uint64_t tag, Client::Impl::WatchRef ref);  // the re-armed blocker watch
  void on_listing(std::uint64_t tag, const Status& st, std::shared_ptr<const Listing> listing);  // list_batched
  void on_children_changed(std::uint64_t tag);
  // An idle retained node is released for real, in the background.
  void end_retention();

 private:
  using Kind = MachineEvent::Kind;
  void begin();
  // One live attempt per owner, lock and client (the locks are not
  // re-entrant). REQUIRES !registered_; false when the owner has one.
  bool enter_registry();
  // Retained leases. retake: false (and `done` untouched) unless this
  // attempt is retained idle for the same owner and options; then `done`
  // gets the re-take's lease, or the outcome of `fallback` (a normal
  // acquisition) when the re-take is void. retake_from_slot: the same for
  // the idle attempt in `request.slot`, which any other request ends.
  static bool retake_from_slot(AttemptRequest& request, Done& done);
  bool retake(AttemptRequest& fallback, Done& done);
  std::shared_ptr<RetainSlot> reserve_idle_locked();       // REQUIRES mu_: a release's may_retain
  void retain_locked(std::shared_ptr<RetainSlot> slot);  // REQUIRES mu_: the release kept the node
  void retake_void_locked(const std::string& why);  // REQUIRES mu_: the re-take did not grant
  // Invariant (6): this acquisition is under way; the owner's idle
  // retentions end. Before any concurrency (start).
  void begin_acquiring();
  void end_acquiring_locked();  // REQUIRES mu_: the outcome is known
  void unlist_idle_locked();    // REQUIRES mu_: no longer retained idle
  // Runs `fn` under mu_, then what it queued in outbox_, unlocked: user
  // callbacks, and anything that may drop the last Lease (whose destructor
  // releases, taking mu_).
  template <class Fn>
  void locked(Fn fn) {
    std::vector<std::function<void()>> after;
    {
      std::lock_guard lk(mu_);
      fn();
      after.swap(outbox_);
    }
    for (auto& f : after) f();
  }
  void deliver_locked(Error error);                 // REQUIRES mu_: the outcome is an error
  Done end_locked();  // REQUIRES mu_: no grant; finished, and `done_` taken (empty if it ran)
  void step_locked(MachineEvent ev);                // REQUIRES mu_: with the clock's verdict, then executed
  void execute_locked(LockMachine::Commands cmds);  // REQUIRES mu_
  // The waiting watchdog (lock_machine.hpp, invariant 7): arms the timer for
  // a wait on the blocker whose name hashes to `blocker`. REQUIRES mu_.
  void arm_watchdog_locked(std::size_t blocker);
  void drop_timer(Client::Impl::TimerId& id) {  // REQUIRES mu_
    if (id != 0) impl_->cancel(std::exchange(id, 0));
  }
  void send_locked(const MachineRequest& c);        // REQUIRES mu_
  void report_locked(const MachineOutcome& c);      // REQUIRES mu_: an outcome
  bool start_release(std::uint64_t grant, std::function<void()> then);
  void keep_alive_while_cleaning();  // REQUIRES mu_
  void end_wait_locked();            // REQUIRES mu_: granted or over: the wait's timers and count go
  void finish_locked();              // REQUIRES mu_: over: the blocker's watch and the registry entry go too
  // ClientOptions::observer, if any: released / lost, queued in outbox_ so
  // that they run unlocked (lock_attempt_observe.cpp). REQUIRES mu_.
  void observe_released_locked();
  void observe_lost_locked(LossReason reason);
  std::string child_path(const std::string& name) const { return req_.lock_path + "/" + name; }
  Holder holder() const;  // who this attempt acts for: its node's data

  // --- immutable after construction ---
  Client* client_;
  Client::Impl* impl_;  // seat_'s session
  Seat seat_;
  AttemptRequest req_;
  std::string owner_;
  std::string guid_;
  std::string data_;

  mutable std::mutex mu_;
  // The machine and a re-take's fallback live apart so that the attempt, one
  // allocation per plain acquisition, stays under glibc's 1 KB thread-cache
  // limit (768 bytes; 1,392 with both inline). Above it each one went to a
  // malloc arena under the arena's lock, and a busy process's hundreds of
  // threads share 8 arenas per core (lock_attempt.cpp asserts the size).
  std::unique_ptr<LockMachine> machine_;  // GUARDED_BY(mu_); set by begin()
  std::uint64_t epoch_ = 0;             // the session of our node (invariant 2)
  Done done_;                           // GUARDED_BY(mu_)
  std::string ensemble_id_;
  std::string node_path_;               // set when granted
  FencingToken token_;                  // GUARDED_BY(mu_): set when granted
  std::uint64_t grant_ = 0;             // GUARDED_BY(mu_): grants so far (invariant 4)
  AttemptRequest* fallback_ = nullptr;  // GUARDED_BY(mu_): inside retake() only (invariant 5)
  Client::Impl::TimerId retain_timer_ = 0;
  std::vector<std::function<void(LossReason, const std::string&)>> lost_cbs_;
  std::vector<std::function<void()>> release_waiters_;
  std::vector<std::function<void()>> outbox_;  // GUARDED_BY(mu_): run by locked() after unlocking
  std::stop_source lost_source_;
  Client::Impl::ObserverId observer_ = 0;
  Client::Impl::TimerId timer_ = 0;
  std::unique_ptr<std::stop_callback<std::function<void()>>> stop_cb_;
  bool registered_ = false;
  bool acquiring_ = false;   // GUARDED_BY(mu_): counted in the OwnerTable (invariant 6)
  bool idle_listed_ = false; // GUARDED_BY(mu_): listed there as idle
  Clock::time_point handed_out_at_{};  // GUARDED_BY(mu_): the grant's hand-out, read only with an observer
  Client::Impl::TimerId keep_alive_timer_ = 0;  // GUARDED_BY(mu_): 0 unless keeping the attempt alive (invariant 3)
  // The waiting watchdog: its timer, the blocker it watches (a hash of the
  // name: the attempt stays in malloc's thread cache) and its period in ms.
  Client::Impl::TimerId watchdog_timer_ = 0;  // GUARDED_BY(mu_)
  std::size_t watchdog_blocker_ = 0;          // GUARDED_BY(mu_)
  std::uint32_t watchdog_ms_ = 0;             // GUARDED_BY(mu_)
  Clock::time_point confirmed_at_{};          // GUARDED_BY(mu_): the step whose listing showed our node (a re-take's `confirmed`)
  // The latest blocker's watch, taken back when the attempt ends before it
  // fires (Client::Impl::unwatch): a waiter that gives up leaves nothing on
  // the node it waited for.
  Client::Impl::WatchRef blocker_watch_;  // GUARDED_BY(mu_)
  // Keeps a pending attempt alive: while waiting, only weak references sit
  // in ZooKeeper's watch table. Cleared when the outcome is delivered.
  std::shared_ptr<LockAttempt> pending_self_;
};

}  // namespace zklock::detail
