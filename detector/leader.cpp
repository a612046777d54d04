#include "detector/leader.hpp"

#include <algorithm>
#include <condition_variable>
#include <future>
#include <mutex>

#include <spdlog/spdlog.h>

#include "model/election_order.hpp"
#include "zklock/path.hpp"
#include "zklock/protocol/node_name.hpp"
#include "zklock/protocol/paths.hpp"

namespace zklock::detector {
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
  // GUARDED_BY(mu). Fresh per session, kept across re-entries within one:
  // a create lost to a connection drop may still commit, and only a GUID we
  // keep lets a later listing find that node as ours (and delete extras)
  // instead of leaving it, first in line, to block every replica.
  std::string guid;
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

  // Enters (again): creates a candidate. `new_session`: our old nodes died
  // with the old session, so a fresh GUID.
  void enter(bool new_session) {
    std::uint64_t gen;
    {
      std::lock_guard lock(mu);
      if (stopped) return;
      gen = ++generation;
      if (new_session || guid.empty()) guid = protocol::new_guid();
      node.reset();
    }
    set_leader(false);
    auto self = shared_from_this();
    ensure(std::string(protocol::kMetadataRoot), gen, [self, gen] {
      self->ensure(self->opt.dir, gen, [self, gen] { self->create_candidate(gen); });
    });
  }

  void ensure(const std::string& path, std::uint64_t gen, std::function<void()> next) {
    auto self = shared_from_this();
    client.create_async(path, "", CreateMode::persistent,
                        [self, gen, path, next = std::move(next)](Status s, const std::string&, const Stat&) {
                          if (!self->current(gen)) return;
                          if (s.ok() || s.is(Errc::node_exists)) {
                            next();
                          } else if (s.is(Errc::no_auth)) {
                            // ZooKeeper checks CREATE on the parent before it
                            // looks for the node: an administrator may have
                            // created it under a parent we may not create in.
                            self->client.stat_async(path, {}, [self, gen, path, next](Status st, const Stat&) {
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
      prefix = protocol::election_candidate_prefix(opt.dir, guid);
    }
    auto self = shared_from_this();
    client.create_async(prefix, opt.id, CreateMode::ephemeral_sequential,
                        [self, gen](Status s, const std::string& created, const Stat&) {
                          if (!self->current(gen)) {
                            if (s.ok()) self->superseded(created);
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

  // A candidate created for an entry that is no longer current. Never
  // leave one behind that could block the election: after stop() or under
  // an old GUID delete it; under our GUID the current entry's listing
  // decides which of our candidates stays (the earliest).
  void superseded(const std::string& created) {
    std::uint64_t gen;
    bool ours;
    {
      std::lock_guard lock(mu);
      gen = generation;
      ours = !stopped && created.find(guid) != std::string::npos;
    }
    if (ours) check(gen);
    else client.remove_async(created, -1, [](Status) {});
  }

  // Lists the candidates, reads the czxids their order needs, and decides.
  void check(std::uint64_t gen) {
    auto self = shared_from_this();
    client.children_async(opt.dir, {}, [self, gen](Status s, std::vector<std::string> names) {
      if (!self->current(gen)) return;
      if (s.is(Errc::no_node)) {  // the directory itself is gone: make it again
        self->enter(false);
        return;
      }
      if (!s.ok()) {
        self->log->warn("leader election: listing {} failed: {}", self->opt.dir, errc_name(s.code()));
        return;  // retried by recheck()
      }
      self->read_czxids(gen, model::election_candidates(names));
    });
  }

  void read_czxids(std::uint64_t gen, std::vector<model::ElectionCandidate> cands) {
    const auto needed = model::election_czxids_needed(cands);
    if (needed.empty()) {
      decide(gen, std::move(cands));
      return;
    }
    struct Reads {
      std::mutex mu;
      std::vector<model::ElectionCandidate> cands;  // GUARDED_BY(mu)
      std::size_t pending = 0;                      // GUARDED_BY(mu)
      std::optional<Status> failure;                // GUARDED_BY(mu)
    };
    auto reads = std::make_shared<Reads>();
    reads->cands = std::move(cands);
    reads->pending = needed.size();
    std::vector<std::string> paths;
    for (auto i : needed) paths.push_back(join_path(opt.dir, reads->cands[i].name));
    auto self = shared_from_this();
    for (std::size_t k = 0; k < needed.size(); ++k) {
      client.stat_async(paths[k], {}, [self, gen, reads, i = needed[k]](Status st, const Stat& stat) {
        std::vector<model::ElectionCandidate> done;
        std::optional<Status> failure;
        {
          std::lock_guard lock(reads->mu);
          if (st.ok()) reads->cands[i].czxid = stat.czxid;
          else if (!st.is(Errc::no_node) && !reads->failure) reads->failure = st;
          // ZNONODE: gone; its czxid stays 0 and it is dropped below.
          if (--reads->pending > 0) return;
          failure = reads->failure;
          done = std::move(reads->cands);
        }
        if (!self->current(gen)) return;
        if (failure) {
          // Only ZNONODE means gone: any other answer leaves the order
          // unknown, so decide nothing until the next recheck().
          self->log->warn("leader election: reading a candidate's czxid failed: {}", errc_name(failure->code()));
          return;
        }
        std::erase_if(done, [](const model::ElectionCandidate& c) { return c.czxid == 0; });
        self->decide(gen, std::move(done));
      });
    }
  }

  // The first candidate in creation order leads; the others watch their
  // predecessor. Our candidate is the earliest carrying our GUID; any later
  // one (a lost create that committed after all) is deleted.
  void decide(std::uint64_t gen, std::vector<model::ElectionCandidate> cands) {
    model::sort_election(cands);
    std::optional<std::size_t> mine;
    std::vector<std::string> extras;
    {
      std::lock_guard lock(mu);
      for (std::size_t i = 0; i < cands.size(); ++i) {
        if (cands[i].guid != guid) continue;
        if (mine) extras.push_back(join_path(opt.dir, cands[i].name));
        else mine = i;
      }
      if (mine) node = join_path(opt.dir, cands[*mine].name);
      else node.reset();
    }
    for (const auto& extra : extras) {
      log->info("leader election: deleting {}, an extra candidate of ours", extra);
      client.remove_async(extra, -1, [](Status) {});
    }
    if (!mine) {
      log->warn("leader election: our candidate node is gone; entering again");
      enter(false);
      return;
    }
    if (*mine == 0) {
      set_leader(true);
      return;
    }
    set_leader(false);
    const auto pred = join_path(opt.dir, cands[*mine - 1].name);
    std::weak_ptr<Core> weak = shared_from_this();
    auto self = shared_from_this();
    client.stat_async(
        pred,
        [weak, gen](const WatchEvent&) {
          if (auto core = weak.lock(); core && core->current(gen)) core->check(gen);
        },
        [self, gen](Status st, const Stat&) {
          if (st.is(Errc::no_node) && self->current(gen)) self->check(gen);
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
    if (s == ConnectionState::connected && core->client.session_epoch() != epoch) core->enter(true);
  });
  core_->enter(true);
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
  core_->client.remove_async(*node, -1, [done](Status s) { done->set_value(s); });
  if (fut.wait_for(timeout) != std::future_status::ready) {
    core_->log->warn("leader election: deleting {} timed out; it vanishes with the session", *node);
  } else if (const auto s = fut.get(); !s.ok() && !s.is(Errc::no_node)) {
    core_->log->warn("leader election: deleting {} failed: {}", *node, errc_name(s.code()));
  }
}

void LeaderElection::recheck() {
  std::uint64_t gen;
  {
    std::lock_guard lock(core_->mu);
    if (core_->stopped) return;
    gen = core_->generation;
  }
  // Listing first, also when we know no node of ours: a create whose answer
  // was lost may have committed, and the listing finds it by our GUID.
  core_->check(gen);
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
