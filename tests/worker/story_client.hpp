// zklock_test_worker story: the lock client (one Client, one FairMutex) that
// reports every event as a line, and writes through fenced-store.
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <stop_token>
#include <string>

#include "zklock/client.hpp"
#include "zklock/fair_mutex.hpp"
#include "zklock/lease.hpp"

namespace zklock::test_worker {

// The story mode's command line (story_mode.cpp documents each flag).
struct StoryArgs {
  std::string connect;
  std::string lock;
  std::string name = "worker";
  std::string db;
  std::string commands;
  std::string key = "story";
  int session_timeout_ms = 2000;
  int connect_timeout_ms = 10000;
  int acquire_timeout_ms = 0;
  int retain_ms = 0;  // MutexOptions::retain (0: none); > 0: every acquisition is owner `name`
  int wait_check_ms = 0;  // ClientOptions::wait_check (0: the default)
  bool strict = false;
  int waiters = 0;
  int hold_ms = 0;
  bool loop = false;
  int writes = 2;
};

// One event line, "<event> <fields> t=<CLOCK_MONOTONIC us>"; newlines in the
// fields are replaced by spaces.
void emit(const std::string& event, const std::string& fields = {});

// The outcome slot of one asynchronous acquisition.
struct Slot {
  int idx = 0;
  std::stop_source stop;
  std::mutex mu;
  zklock::Lease lease;  // GUARDED_BY(mu)
  bool done = false;    // GUARDED_BY(mu)
  bool failed = false;  // GUARDED_BY(mu): done without a grant (a released slot has no lease either)
};

class StoryClient {
 public:
  // Connects, creates the mutex and emits "ready"; session events are emitted as "state".
  explicit StoryClient(StoryArgs args);

  const StoryArgs& args() const { return args_; }

  // Starts acquisition number `idx`; `granted` (optional) runs on the
  // callback thread after the grant is reported.
  std::shared_ptr<Slot> start_acquire(int idx, std::function<void(std::shared_ptr<Slot>)> granted = {});
  // Emits "check": valid()/suspended()/loss of the slot's lease.
  void check(const std::shared_ptr<Slot>& s);
  // Writes through fenced-store with the slot's lease token ("write ... rc=-1 msg=no lease" without one).
  void write(const std::shared_ptr<Slot>& s, const std::string& key, const std::string& value,
             const std::string& fence = {});
  // Emits valid() as it was before the write, then the store's verdict.
  void write_with(const zklock::Lease& lease, const std::string& token, const std::string& key,
                  const std::string& value, const std::string& fence = {});
  // Releases the slot's lease, if it holds one, between "releasing" and "released".
  void release(const std::shared_ptr<Slot>& s);

 private:
  StoryArgs args_;
  std::unique_ptr<zklock::Client> client_;
  std::unique_ptr<zklock::FairMutex> mutex_;
};

}  // namespace zklock::test_worker
