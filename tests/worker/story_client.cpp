// zklock_test_worker story: the lock client's events, its writes through
// fenced-store (spawned per write), and its RSS.
#include "story_client.hpp"

#include <time.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <utility>

#include "child_process.hpp"
#include "worker.hpp"
#include "zklock/error.hpp"

namespace zklock::test_worker {
namespace {

std::int64_t mono_us() {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1000000 + ts.tv_nsec / 1000;
}

std::string hex(std::int64_t v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "0x%llx", static_cast<unsigned long long>(v));
  return buf;
}

struct WriteOutcome {
  int rc = -1;
  std::string message;  // the store's stderr, first line
};

// Runs `fenced-store --db DB put KEY VALUE --token T [--fence F]` to its end
// (ChildProcess: in its own process group, killed if this thread dies),
// capturing stderr.
WriteOutcome store_put(const std::string& db, const std::string& key, const std::string& value,
                       const std::string& token, const std::string& fence) {
#ifndef FENCED_STORE_BIN
  (void)db, (void)key, (void)value, (void)token, (void)fence;
  return {-1, "this zklock_test_worker was built without fenced-store (ZKLOCK_BUILD_EXAMPLES=OFF)"};
#else
  zklock::test::SpawnOptions options{.argv = {FENCED_STORE_BIN, "--db", db, "put", key, value, "--token", token}};
  if (!fence.empty()) options.argv.insert(options.argv.end(), {"--fence", fence});
  zklock::test::RunResult r;
  try {
    // Bounded, unlike a write's wait on the store: a store stuck past a
    // minute is reported as killed (rc 137), not waited for forever.
    r = zklock::test::run_to_exit(std::move(options), std::chrono::seconds(60));
  } catch (const std::exception& e) {
    return {-1, std::string("spawn fenced-store: ") + e.what()};
  }
  return {r.code, r.err.substr(0, r.err.find('\n'))};
#endif
}

}  // namespace

void emit(const std::string& event, const std::string& fields) {
  std::string line = event;
  if (!fields.empty()) line += " " + fields;
  for (auto& c : line) {
    if (c == '\n' || c == '\r') c = ' ';
  }
  print_line(line + " t=" + std::to_string(mono_us()));
}

StoryClient::StoryClient(StoryArgs args) : args_(std::move(args)) {
  zklock::ClientOptions opts;
  opts.connect = args_.connect;
  opts.session_timeout = std::chrono::milliseconds(args_.session_timeout_ms);
  opts.connect_timeout = std::chrono::milliseconds(args_.connect_timeout_ms);
  opts.wait_check = std::chrono::milliseconds(args_.wait_check_ms);
  opts.owner_prefix = args_.name;
  opts.zk_log_level = zklock::LogLevel::error;
  client_ = std::make_unique<zklock::Client>(opts);
  client_->add_listener([this](zklock::ConnectionState s) {
    emit("state", "s=" + std::string(zklock::state_name(s)) + " session=" + hex(client_->session_id()) +
                      " epoch=" + std::to_string(client_->session_epoch()));
  });
  mutex_ = std::make_unique<zklock::FairMutex>(
      *client_, args_.lock,
      zklock::MutexOptions{.loss_policy = args_.strict ? zklock::LossPolicy::strict : zklock::LossPolicy::tolerant,
                           .retain = std::chrono::milliseconds(args_.retain_ms)});
  emit("ready", "session=" + hex(client_->session_id()) +
                    " timeout=" + std::to_string(client_->negotiated_timeout().count()) +
                    " pid=" + std::to_string(::getpid()));
}

std::shared_ptr<Slot> StoryClient::start_acquire(int idx, std::function<void(std::shared_ptr<Slot>)> granted) {
  auto slot = std::make_shared<Slot>();
  slot->idx = idx;
  zklock::AcquireOptions ao;
  // One owner per acquisition; a retaining worker is one owner (only the
  // same owner re-takes its retained node).
  ao.owner = args_.retain_ms > 0 ? args_.name : args_.name + "/" + std::to_string(idx);
  ao.description = "story worker " + args_.name;
  mutex_->acquire_async(
      [this, slot, granted](zklock::AcquireResult r) {
        if (r.error) {
          emit("acquire_failed", "idx=" + std::to_string(slot->idx) + " code=" +
                                     std::string(zklock::errc_name(r.error->code())) + " msg=" + r.error->what());
          std::lock_guard lock(slot->mu);
          slot->done = true;
          slot->failed = true;
          return;
        }
        // Under the slot's mutex, so a command answering "acquired" finds
        // the lease, and a release waits until on_lost is registered.
        {
          std::lock_guard lock(slot->mu);
          slot->lease = std::move(r.lease);
          slot->done = true;
          emit("acquired", "idx=" + std::to_string(slot->idx) + " token=" + slot->lease.token().str() +
                               " node=" + slot->lease.node_path() + " session=" + hex(client_->session_id()));
          slot->lease.on_lost([idx = slot->idx](zklock::LossReason why, const std::string& detail) {
            emit("lost", "idx=" + std::to_string(idx) + " reason=" +
                             std::string(zklock::loss_reason_name(why)) + " detail=" + detail);
          });
        }
        if (granted) granted(slot);
      },
      ao, std::chrono::milliseconds(args_.acquire_timeout_ms), slot->stop.get_token());
  return slot;
}

void StoryClient::check(const std::shared_ptr<Slot>& s) {
  std::string fields;
  if (!s || !s->lease) {
    fields = "valid=0 suspended=0 loss=none held=0";
  } else {
    // valid() first: on resume from a freeze this is the very first call.
    const bool valid = s->lease.valid();
    const bool susp = s->lease.suspended();
    auto loss = s->lease.loss_reason();
    fields = std::string("valid=") + (valid ? "1" : "0") + " suspended=" + (susp ? "1" : "0") +
             " loss=" + (loss ? std::string(zklock::loss_reason_name(*loss)) : "none") + " held=1";
  }
  emit("check", fields + " session=" + hex(client_->session_id()) +
                    " epoch=" + std::to_string(client_->session_epoch()) +
                    " state=" + std::string(zklock::state_name(client_->state())));
}

void StoryClient::write(const std::shared_ptr<Slot>& s, const std::string& key, const std::string& value,
           const std::string& fence) {
  if (!s || !s->lease) {
    emit("write", "key=" + key + " value=" + value + " token=none valid_before=0 rc=-1 msg=no lease");
    return;
  }
  write_with(s->lease, s->lease.token().str(), key, value, fence);
}

void StoryClient::write_with(const zklock::Lease& lease, const std::string& token, const std::string& key,
                const std::string& value, const std::string& fence) {
  // valid() is read before the write is issued and reported with it; the
  // write goes out regardless, so the store's verdict is what is tested.
  const bool valid = lease.valid();
  auto out = store_put(args_.db, key, value, token, fence);
  emit("write", "key=" + key + " value=" + value + " token=" + token +
                    " valid_before=" + (valid ? "1" : "0") + " rc=" + std::to_string(out.rc) +
                    " msg=" + out.message);
}

void StoryClient::release(const std::shared_ptr<Slot>& s) {
  if (!s) return;
  zklock::Lease lease;
  {
    std::lock_guard lock(s->mu);
    if (!s->lease) return;
    lease = std::move(s->lease);
  }
  emit("releasing", "idx=" + std::to_string(s->idx) + " token=" + lease.token().str());
  lease.release();
  emit("released", "idx=" + std::to_string(s->idx));
}

}  // namespace zklock::test_worker
