// Mirror's public surface over Mirror::Core (detector/mirror_core.hpp).
#include "detector/mirror.hpp"

#include "detector/mirror_core.hpp"

namespace zklock::detector {

Mirror::Mirror(Client& client, MirrorOptions options)
    : core_(std::make_shared<Core>(client, std::move(options))) {}

// The opened Clients are closed here, on the caller's thread: never in a
// callback of their own, and only once no pump is issuing on them (their
// pending callbacks then run with Errc::closing and find the core stopped).
Mirror::~Mirror() {
  std::vector<std::unique_ptr<Client>> owned;
  const auto listeners = core_->stop(owned);
  if (opener_.joinable()) opener_.join();
  for (const auto& [client, id] : listeners) client->remove_listener(id);
  owned.clear();
}

void Mirror::start() {
  {
    std::lock_guard lock(core_->mu);
    core_->sessions[0]->epoch = core_->client.session_epoch();  // the session start() mirrors
  }
  const auto listener = core_->listen(core_->client, 0);
  {
    std::lock_guard lock(core_->mu);
    core_->sessions[0]->listener = listener;
  }
  opener_ = std::thread([core = core_] { core->open_sessions(); });
  {
    // The load's directories are spread over the load sessions only if they
    // are open when it starts; a session that is late gets the directories
    // met after it opens.
    std::unique_lock lock(core_->mu);
    const auto want = core_->opt.load_sessions;
    if (!core_->session_cv.wait_for(lock, core_->client.options().connect_timeout,
                                    [&] { return core_->stopped || core_->sessions.size() >= want; })) {
      core_->log->warn("mirror: {} of {} load sessions open after {} ms; loading on those", core_->sessions.size(),
                       want, core_->client.options().connect_timeout.count());
    }
  }
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
  s.nodes = core_->index.node_count();
  s.pending = core_->queue.size() + core_->inflight + core_->parked.size();
  for (const auto& session : core_->sessions) s.session_watch_bytes.push_back(session->bytes);
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
