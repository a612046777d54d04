// Per client, per owner: its live attempts, its acquisitions under way and its idle retained attempts.
//
// The bookkeeping behind two rules of the lock shell (lock_attempt.hpp):
//  - one live attempt per owner and lock (the locks are not re-entrant: a
//    second request by the same owner for the same lock would wait for
//    itself), and
//  - invariant (6): an owner with an acquisition under way keeps no idle
//    retained node, so its node in a queue is never a wait-for edge towards
//    a node of its own that nobody holds. An acquisition takes the owner's
//    idle attempts out (the caller ends them); a release may list its
//    attempt as idle only while the owner acquires nothing, decided under
//    the same lock as the count.
//
// Holds weak references only and never locks one: a shared_ptr dropped under
// `mu_` could destroy an attempt there. `mu_` is a leaf lock (taken under an
// attempt's lock; nothing is locked while it is held). A template so that
// tests/unit/owner_table_test.cpp can drive it without a client.
#pragma once

#include <algorithm>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace zklock::detail {

template <class Attempt>
class OwnerTable {
 public:
  using Weak = std::weak_ptr<Attempt>;

  // False when the owner already has a live attempt on the lock.
  bool enter(const std::string& lock_path, const std::string& owner) {
    std::lock_guard lk(mu_);
    return live_.insert(key(lock_path, owner)).second;
  }
  void leave(const std::string& lock_path, const std::string& owner) {
    std::lock_guard lk(mu_);
    live_.erase(key(lock_path, owner));
  }

  // An acquisition (not a re-take) begins: counted until end_acquiring. The
  // owner's idle attempts are returned, no longer listed, to be ended.
  std::vector<Weak> begin_acquiring(const std::string& owner) {
    std::lock_guard lk(mu_);
    auto it = owners_.find(owner);
    if (it == owners_.end()) {
      // Entries outlive their counts (re-made per acquisition they would
      // cost two allocations on the plain path); empty ones are forgotten
      // past kMaxOwners (threads come and go).
      if (owners_.size() >= kMaxOwners) {
        std::erase_if(owners_, [](const auto& kv) { return kv.second.acquiring <= 0 && kv.second.idle.empty(); });
      }
      it = owners_.emplace(owner, Owner{}).first;
    }
    ++it->second.acquiring;
    return std::exchange(it->second.idle, {});
  }
  void end_acquiring(const std::string& owner) {
    std::lock_guard lk(mu_);
    if (const auto it = owners_.find(owner); it != owners_.end()) --it->second.acquiring;
  }

  // A release would keep `idle`: listed, and true, unless the owner has an
  // acquisition under way.
  bool list_idle(const std::string& owner, Weak idle) {
    std::lock_guard lk(mu_);
    auto& o = owners_[owner];
    if (o.acquiring > 0) return false;
    o.idle.push_back(std::move(idle));
    return true;
  }
  // No longer idle (re-taken, released for real, or not kept after all).
  void unlist_idle(const std::string& owner, const Weak& idle) {
    std::lock_guard lk(mu_);
    const auto it = owners_.find(owner);
    if (it == owners_.end()) return;
    std::erase_if(it->second.idle,
                  [&](const Weak& w) { return w.expired() || (!w.owner_before(idle) && !idle.owner_before(w)); });
  }

  static constexpr std::size_t kMaxOwners = 4096;

 private:
  struct Owner {
    std::vector<Weak> idle;  // its retained idle attempts
    int acquiring = 0;       // its acquisitions under way (not re-takes)
  };
  static std::string key(const std::string& lock_path, const std::string& owner) { return lock_path + '\n' + owner; }

  std::mutex mu_;
  std::set<std::string> live_;                      // GUARDED_BY(mu_): key() of every live attempt
  std::unordered_map<std::string, Owner> owners_;  // GUARDED_BY(mu_)
};

}  // namespace zklock::detail
