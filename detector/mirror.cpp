// Mirror's public surface over Mirror::Core (detector/mirror_core.hpp).
#include "detector/mirror.hpp"

#include "detector/mirror_core.hpp"

namespace zklock::detector {

Mirror::Mirror(Client& client, MirrorOptions options)
    : core_(std::make_shared<Core>(client, std::move(options))) {}

Mirror::~Mirror() {
  {
    std::lock_guard lock(core_->mu);
    core_->stopped = true;
    core_->queue.clear();
  }
  if (core_->listener) core_->client.remove_listener(core_->listener);
}

void Mirror::start() {
  std::weak_ptr<Core> weak = core_;
  const auto epoch = core_->client.session_epoch();
  core_->listener = core_->client.add_listener([weak, epoch](ConnectionState s) {
    if (s != ConnectionState::connected) return;
    if (auto core = weak.lock()) {
      if (core->client.session_epoch() == epoch) return;  // the session start() already mirrors
      core->log->info("mirror: new ZooKeeper session: re-mirroring {}", core->opt.root);
      core->restart_all(Core::Restart::new_session);
    }
  });
  core_->restart_all(Core::Restart::start);
}

void Mirror::resync() { core_->restart_all(Core::Restart::resync); }

model::QueueSnapshot Mirror::snapshot() const {
  std::lock_guard lock(core_->mu);
  return core_->index.snapshot();
}

std::vector<model::LockQueue> Mirror::queues() const {
  std::lock_guard lock(core_->mu);
  return core_->index.queues();
}

std::vector<model::LoneNode> Mirror::lone_nodes(const std::string& owner_key) const {
  std::lock_guard lock(core_->mu);
  return core_->index.lone_nodes(owner_key);
}

MirrorStats Mirror::stats() const {
  std::lock_guard lock(core_->mu);
  auto s = core_->stats;
  s.dirs = core_->dirs.size();
  s.nodes = core_->nodes.size();
  s.pending = core_->queue.size() + core_->inflight;
  return s;
}

bool Mirror::idle() const {
  std::lock_guard lock(core_->mu);
  return core_->idle_locked();
}

bool Mirror::wait_idle(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(core_->mu);
  return core_->idle_cv.wait_for(lock, timeout, [&] { return core_->idle_locked(); });
}

}  // namespace zklock::detector
