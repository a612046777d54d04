// Retained leases in the shell: the mutex's slot for an idle node, its retain timer, the re-take, and the owner's rule.
//
// The machine decides when a node may be kept and when a re-take grants
// (lock_machine.hpp, invariant 5); this file keeps the idle attempt alive in
// its mutex's RetainSlot, hands it a re-take by the same owner within the
// request's timeout and stop_token, and ends an owner's idle retentions
// when that owner queues anywhere (lock_attempt.hpp, invariants 5 and 6).
#include <algorithm>
#include <utility>

#include "attempt_tables.hpp"
#include "lock_attempt.hpp"

namespace zklock::detail {
namespace {

using Kind = MachineEvent::Kind;

}  // namespace

RetainSlot::~RetainSlot() {
  std::shared_ptr<LockAttempt> idle;
  {
    std::lock_guard lk(mu);
    idle = std::move(attempt);
  }
  if (idle) idle->end_retention();
}

// A retained idle attempt in the request's slot serves the request when the
// same owner asks again; any other request ends that retention and queues.
bool LockAttempt::retake_from_slot(AttemptRequest& request, Done& done) {
  auto slot = request.slot.lock();
  if (!slot || request.retain <= std::chrono::milliseconds::zero()) return false;
  std::shared_ptr<LockAttempt> idle;
  {
    std::lock_guard lk(slot->mu);
    idle = std::move(slot->attempt);
  }
  if (!idle) return false;
  if (idle->retake(request, done)) return true;
  idle->end_retention();  // another owner (or not idle any more): it queues normally
  return false;
}

// REQUIRES mu_. The node stays idle: the retain timer ends the retention
// unless a re-take comes first; the slot keeps the attempt alive (the slot's
// lock is taken inside ours here, never the other way round). Not while the
// owner has an acquisition under way (invariant 6): it may be queued, and
// must not also stand in a queue as an idle node nobody holds.
void LockAttempt::retain_locked() {
  auto slot = req_.slot.lock();
  bool owner_acquiring = false;
  if (slot) {
    auto& t = *impl_->attempt_tables;
    std::lock_guard lk(t.mu);
    auto& o = t.owners[owner_];
    owner_acquiring = o.acquiring > 0;
    if (!owner_acquiring) {
      o.idle.push_back(weak_from_this());
      idle_listed_ = true;
    }
  }
  if (!slot || owner_acquiring) {  // the mutex is gone (nobody can re-take), or the owner may wait
    execute_locked(machine_->step(MachineEvent{Kind::retain_over}));
    return;
  }
  std::weak_ptr<LockAttempt> weak = weak_from_this();
  retain_timer_ = impl_->schedule_at(Clock::now() + req_.retain, [weak] {
    if (auto s = weak.lock()) s->feed(MachineEvent{Kind::retain_over});
  });
  std::shared_ptr<LockAttempt> displaced;
  {
    std::lock_guard lk(slot->mu);
    displaced = std::exchange(slot->attempt, shared_from_this());
  }
  if (displaced) outbox_.push_back([displaced] { displaced->end_retention(); });
}

bool LockAttempt::retake(AttemptRequest& fallback, Done& done) {
  bool taken = false;
  locked([&] {
    if (!machine_ || !machine_->may_retake(holder_for(*client_, fallback))) return;
    if (!enter_registry()) return;
    taken = true;
    if (retain_timer_ != 0) impl_->cancel(retain_timer_);
    retain_timer_ = 0;
    done_ = std::move(done);
    // Invariant (5): the request's timeout runs from here, through the
    // fallback if the re-take is void; its stop_token cancels either.
    const auto timeout = fallback.timeout;
    retake_ = std::make_unique<Retake>(Retake{std::move(fallback), std::nullopt});
    const std::uint64_t gen = grant_;  // a later re-take's cancel finds grant_ moved on
    std::weak_ptr<LockAttempt> weak = weak_from_this();
    if (timeout > std::chrono::milliseconds::zero()) {
      retake_->deadline = Clock::now() + timeout;
      timer_ = impl_->schedule_at(*retake_->deadline, [weak, gen, path = req_.lock_path] {
        if (auto s = weak.lock()) s->cancel_retake(gen, Errc::timeout, "timed out waiting for " + path);
      });
    }
    if (retake_->fallback.stop.stop_possible()) {
      // Made under mu_, and it runs inline if the stop was requested
      // already: so it only defers the cancel. The one it replaces goes
      // unlocked (its callback may be waiting for mu_).
      if (stop_cb_) outbox_.push_back([old = std::shared_ptr<std::stop_callback<std::function<void()>>>(std::move(stop_cb_))] {});
      stop_cb_ = std::make_unique<std::stop_callback<std::function<void()>>>(
          retake_->fallback.stop, std::function<void()>([impl = impl_ref_, weak, gen, path = req_.lock_path] {
            impl->defer([weak, gen, path] {
              if (auto s = weak.lock()) s->cancel_retake(gen, Errc::cancelled, "acquisition of " + path + " cancelled");
            });
          }));
    }
    pending_self_ = shared_from_this();
    execute_locked(machine_->step(MachineEvent{Kind::retake}));
  });
  return taken;
}

// REQUIRES mu_. Queue anew: the machine's remove went out first, so a
// waiter the re-take's listing found is ahead of our new node. With the time
// the re-take left (invariant 5); none left is the request's timeout.
void LockAttempt::retake_void_locked(const std::string& why) {
  finish_locked();
  impl_->defer([keep = std::move(pending_self_)] {});
  abandoned_ = false;  // nothing to release: the node is going
  auto done = std::exchange(done_, nullptr);
  auto retake = std::move(retake_);
  impl_->log->debug("re-take of {} void: {}", req_.lock_path, why);
  if (!done || !retake) return;
  if (retake->deadline) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(*retake->deadline - Clock::now());
    if (left <= std::chrono::milliseconds::zero()) {
      outbox_.push_back([done = std::move(done), path = req_.lock_path] {
        done(AcquireResult{Lease(), Error(Errc::timeout, "timed out waiting for " + path)});
      });
      return;
    }
    retake->fallback.timeout = left;
  }
  outbox_.push_back([client = client_, done = std::move(done), fallback = std::move(retake->fallback)]() mutable {
    try {
      LockAttempt::start(*client, std::move(fallback), done);
    } catch (const Error& e) {
      done(AcquireResult{Lease(), e});
    } catch (const std::exception& e) {
      done(AcquireResult{Lease(), Error(Errc::system_error, e.what())});
    }
  });
}

// The machine waits for its setData and listing whatever the caller does, so
// the shell answers the caller now, keeps the attempt alive until the
// machine is done, and releases a grant that still comes (execute_locked).
void LockAttempt::cancel_retake(std::uint64_t grant, Errc errc, std::string message) {
  locked([&] {
    if (awaiting_valid_ && grant_ == grant + 1 && done_) {  // granted, held back (invariant 7): the same end
      give_up_awaiting_locked(Error(errc, message + " (granted, but the session's validity could not be proven in time)"));
      return;
    }
    if (!machine_ || machine_->phase() != LockMachine::Phase::retaking || grant_ != grant || !done_) return;
    abandoned_ = true;
    retake_.reset();
    deliver_locked(Error(errc, std::move(message)));  // the timer and the registry entry go too
    keep_alive_while_cleaning();
  });
}

// Invariant (6). The owner's idle attempts get their release out before
// this attempt's create: one session, so the server applies it first, and
// no snapshot shows our node queued beside an idle node of the owner's.
// An owner's entry outlives its counts: re-made for every acquisition it
// would cost two allocations (node and key) on the plain path. Entries with
// nothing in them are forgotten past 4,096 owners (threads come and go).
void LockAttempt::begin_acquiring() {
  std::vector<std::weak_ptr<LockAttempt>> idle;
  {
    auto& t = *impl_->attempt_tables;
    std::lock_guard lk(t.mu);
    auto it = t.owners.find(owner_);
    if (it == t.owners.end()) {
      if (t.owners.size() >= 4096) {
        std::erase_if(t.owners, [](const auto& kv) { return kv.second.acquiring <= 0 && kv.second.idle.empty(); });
      }
      it = t.owners.emplace(owner_, AttemptTables::Owner{}).first;
    }
    ++it->second.acquiring;
    if (!it->second.idle.empty()) idle.swap(it->second.idle);
  }
  acquiring_ = true;
  for (const auto& w : idle) {
    if (auto a = w.lock()) a->end_retention();  // takes its lock: none is held here
  }
}

void LockAttempt::end_acquiring_locked() {
  if (!acquiring_) return;
  acquiring_ = false;
  auto& t = *impl_->attempt_tables;
  std::lock_guard lk(t.mu);
  const auto it = t.owners.find(owner_);
  if (it != t.owners.end()) --it->second.acquiring;
}

// Compares owners, never locks a weak reference: a shared_ptr dropped under
// t.mu could destroy an attempt there (t.mu is a leaf).
void LockAttempt::unlist_idle_locked() {
  if (!idle_listed_) return;
  idle_listed_ = false;
  const std::weak_ptr<LockAttempt> me = weak_from_this();
  auto& t = *impl_->attempt_tables;
  std::lock_guard lk(t.mu);
  const auto it = t.owners.find(owner_);
  if (it == t.owners.end()) return;
  std::erase_if(it->second.idle, [&](const std::weak_ptr<LockAttempt>& w) {
    return w.expired() || (!w.owner_before(me) && !me.owner_before(w));
  });
}

void LockAttempt::end_retention() {
  locked([&] {
    if (retain_timer_ != 0) impl_->cancel(retain_timer_);
    retain_timer_ = 0;
    if (machine_) execute_locked(machine_->step(MachineEvent{Kind::retain_over}));
  });
}

}  // namespace zklock::detail
