// Per client: what the last exclusive acquisition of each lock found when it was released (MachineConfig::history).
//
// Per client and lock, not per mutex object: code that makes a mutex for
// each acquisition benefits too. A hint only (safety never depends on it:
// the machine decides what follows from it), forgotten wholesale past
// kMaxLocks locks. `mu_` is a leaf lock (taken under an attempt's lock).
#pragma once

#include <cstddef>
#include <mutex>
#include <string>
#include <unordered_map>

#include "lock_machine_types.hpp"

namespace zklock::detail {

class LockHistoryTable {
 public:
  LockHistory seen_before(const std::string& lock_path) const {
    std::lock_guard lk(mu_);
    const auto it = contended_.find(lock_path);
    return it == contended_.end() ? LockHistory::unknown : it->second ? LockHistory::contended : LockHistory::free;
  }
  void remember(const std::string& lock_path, bool contended) {
    std::lock_guard lk(mu_);
    if (contended_.size() >= kMaxLocks && !contended_.contains(lock_path)) contended_.clear();
    contended_[lock_path] = contended;
  }

  static constexpr std::size_t kMaxLocks = 4096;

 private:
  mutable std::mutex mu_;
  std::unordered_map<std::string, bool> contended_;  // GUARDED_BY(mu_): did it find others?
};

}  // namespace zklock::detail
