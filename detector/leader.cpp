#include "detector/leader.hpp"

#include <algorithm>
#include <charconv>
#include <condition_variable>
#include <future>
#include <mutex>

#include <spdlog/spdlog.h>

#include "zklock/node_name.hpp"

namespace zklock::detector {
namespace {

// The sequence suffix of a candidate name "c_<guid>_<seq>"; nullopt if foreign.
std::optional<std::int32_t> candidate_sequence(const std::string& name) {
  if (!name.starts_with("c_")) return std::nullopt;
  const auto us = name.rfind('_');
  if (us == std::string::npos || us + 1 >= name.size()) return std::nullopt;
  std::int64_t v = 0;
  const char* first = name.data() + us + 1;
  const char* last = name.data() + name.size();
  auto [end, ec] = std::from_chars(first, last, v);
  if (ec != std::errc() || end != last || v < INT32_MIN || v > INT32_MAX) return std::nullopt;
  return static_cast<std::int32_t>(v);
}

}  // namespace

struct LeaderElection::Core : std::enable_shared_from_this<LeaderElection::Core> {
  Core(Client& c, LeaderOptions o) : client(c), opt(std::move(o)) {
    log = opt.log ? opt.log : spdlog::default_logger();
  }

  Client& client;
  LeaderOptions opt;
  std::shared_ptr<spdlog::logger> log;
  Client::ListenerId listener = 0;

  mutable std::mutex mu;
  mutable std::condition_variable cv;
  bool stopped = false;                // GUARDED_BY(mu)
  bool leader = false;                 // GUARDED_BY(mu)
  std::uint64_t generation = 0;        // GUARDED_BY(mu): one per entry into the election
  std::string guid;                    // GUARDED_BY(mu)
  std::optional<std::string> node;     // GUARDED_BY(mu)

  void set_leader(bool value) {
    bool changed = false;
    {
      std::lock_guard lock(mu);
      if (value && stopped) return;
      changed = leader != value;
      leader = value;
      cv.notify_all();
    }
    if (changed) {
      log->info("leader election: {} ({})", value ? "now the leader" : "no longer the leader",
                candidate_path().value_or("-"));
      if (opt.on_change) opt.on_change(value);
    }
  }
  std::optional<std::string> candidate_path() const {
    std::lock_guard lock(mu);
    return node;
  }
  bool current(std::uint64_t gen) const {
    std::lock_guard lock(mu);
    return !stopped && gen == generation;
  }

  void enter() {
    std::uint64_t gen;
    {
      std::lock_guard lock(mu);
      if (stopped) return;
      gen = ++generation;
      guid = new_guid();
      node.reset();
    }
    set_leader(false);
    auto self = shared_from_this();
    ensure("/zklock", gen, [self, gen] {
      self->ensure(self->opt.dir, gen, [self, gen] { self->create_candidate(gen); });
    });
  }

  void ensure(const std::string& path, std::uint64_t gen, std::function<void()> next) {
    auto self = shared_from_this();
    client.create(path, "", CreateMode::persistent,
                  [self, gen, path, next = std::move(next)](Status s, const std::string&, const Stat&) {
                    if (!self->current(gen)) return;
                    if (s.ok() || s.is(Errc::node_exists)) {
                      next();
                    } else if (s.is(Errc::no_auth)) {
                      // ZooKeeper checks CREATE on the parent before it
                      // looks for the node: an administrator may have
                      // created it under a parent we may not create in.
                      self->client.exists(path, {}, [self, gen, path, next](Status st, const Stat&) {
                        if (!self->current(gen)) return;
                        if (st.ok()) {
                          next();
                        } else {
                          self->log->warn("leader election: cannot create {}: no_auth; retrying on the next poll",
                                          path);
                        }
                      });
                    } else {
                      self->log->warn("leader election: cannot create {}: {}; retrying on the next poll", path,
                                      errc_name(s.code()));
                    }
                  });
  }

  void create_candidate(std::uint64_t gen) {
    std::string prefix;
    {
      std::lock_guard lock(mu);
      prefix = opt.dir + "/c_" + guid + "_";
    }
    auto self = shared_from_this();
    client.create(prefix, opt.id, CreateMode::ephemeral_sequential,
                  [self, gen](Status s, const std::string& created, const Stat&) {
                    if (!self->current(gen)) {
                      // Superseded (re-entered or stopped): never leave a
                      // candidate behind that could block the election.
                      if (s.ok()) self->client.remove(created, -1, [](Status) {});
                      return;
                    }
                    if (s.ok()) {
                      {
                        std::lock_guard lock(self->mu);
                        self->node = created;
                      }
                      self->check(gen);
                    } else {
                      // A create lost to a connection drop may still have
                      // happened: check() finds our node again by its GUID.
                      self->log->warn("leader election: creating the candidate node failed: {}",
                                      errc_name(s.code()));
                      self->check(gen);
                    }
                  });
  }

  void check(std::uint64_t gen) {
    auto self = shared_from_this();
    client.get_children(opt.dir, {}, [self, gen](Status s, std::vector<std::string> names) {
      if (!self->current(gen)) return;
      if (!s.ok()) {
        self->log->warn("leader election: listing {} failed: {}", self->opt.dir, errc_name(s.code()));
        return;  // retried by poll()
      }
      std::vector<std::pair<std::int32_t, std::string>> cands;
      for (auto& n : names) {
        if (auto seq = candidate_sequence(n)) cands.emplace_back(*seq, std::move(n));
      }
      std::sort(cands.begin(), cands.end(), [](const auto& a, const auto& b) {
        if (const int c = compare_sequence(a.first, b.first); c != 0) return c < 0;
        return a.second < b.second;
      });
      std::string mine;
      {
        std::lock_guard lock(self->mu);
        for (const auto& c : cands) {
          if (c.second.find(self->guid) != std::string::npos) mine = c.second;
        }
        if (!mine.empty()) self->node = self->opt.dir + "/" + mine;
        else self->node.reset();
      }
      if (mine.empty()) {
        self->log->warn("leader election: our candidate node is gone; entering again");
        self->enter();
        return;
      }
      const auto pos = std::find_if(cands.begin(), cands.end(), [&](const auto& c) { return c.second == mine; });
      if (pos == cands.begin()) {
        self->set_leader(true);
        return;
      }
      self->set_leader(false);
      const auto pred = self->opt.dir + "/" + std::prev(pos)->second;
      std::weak_ptr<Core> weak = self;
      self->client.exists(
          pred,
          [weak, gen](const WatchEvent&) {
            if (auto core = weak.lock(); core && core->current(gen)) core->check(gen);
          },
          [self, gen](Status st, const Stat&) {
            if (st.is(Errc::no_node) && self->current(gen)) self->check(gen);
          });
    });
  }
};

LeaderElection::LeaderElection(Client& client, LeaderOptions options)
    : core_(std::make_shared<Core>(client, std::move(options))) {}

LeaderElection::~LeaderElection() { stop(); }

void LeaderElection::start() {
  std::weak_ptr<Core> weak = core_;
  const auto epoch = core_->client.session_epoch();
  core_->listener = core_->client.add_listener([weak, epoch](ConnectionState s) {
    auto core = weak.lock();
    if (!core) return;
    if (s == ConnectionState::lost) core->set_leader(false);
    // A new session: our node died with the old one. (The session start()
    // entered with may report `connected` late: ignore that one.)
    if (s == ConnectionState::connected && core->client.session_epoch() != epoch) core->enter();
  });
  core_->enter();
}

void LeaderElection::stop(std::chrono::milliseconds timeout) {
  std::optional<std::string> node;
  {
    std::lock_guard lock(core_->mu);
    if (core_->stopped) return;
    core_->stopped = true;
    node = core_->node;
  }
  if (core_->listener) core_->client.remove_listener(core_->listener);
  core_->set_leader(false);
  if (!node) return;
  auto done = std::make_shared<std::promise<Status>>();
  auto fut = done->get_future();
  core_->client.remove(*node, -1, [done](Status s) { done->set_value(s); });
  if (fut.wait_for(timeout) != std::future_status::ready) {
    core_->log->warn("leader election: deleting {} timed out; it vanishes with the session", *node);
  } else if (const auto s = fut.get(); !s.ok() && !s.is(Errc::no_node)) {
    core_->log->warn("leader election: deleting {} failed: {}", *node, errc_name(s.code()));
  }
}

void LeaderElection::recheck() {
  std::uint64_t gen;
  bool have_node;
  {
    std::lock_guard lock(core_->mu);
    if (core_->stopped) return;
    gen = core_->generation;
    have_node = core_->node.has_value();
  }
  if (have_node) core_->check(gen);
  else core_->enter();
}

bool LeaderElection::is_leader() const {
  std::lock_guard lock(core_->mu);
  return core_->leader;
}

std::optional<std::string> LeaderElection::leader_node() const {
  std::lock_guard lock(core_->mu);
  if (!core_->leader) return std::nullopt;
  return core_->node;
}

std::optional<std::string> LeaderElection::candidate_node() const { return core_->candidate_path(); }

bool LeaderElection::wait_leader(std::chrono::milliseconds timeout) const {
  std::unique_lock lock(core_->mu);
  return core_->cv.wait_for(lock, timeout, [&] { return core_->leader; });
}

}  // namespace zklock::detector
