// An in-memory model of the ZooKeeper 3.8.0 semantics the lock recipe relies
// on, for the deterministic simulator (tests/sim). Single-threaded and
// seeded: the scheduler (sim_world.cpp) decides which step runs next, this
// model only says what each step does.
//
// What is modelled:
//  - A tree of nodes with czxid/mzxid/version, ephemeral owners, containers,
//    and each parent's child counter (cversion).
//  - The server pipeline: a write is *prepared* (zxid and sequential suffix
//    assigned against the latest pending state, as PrepRequestProcessor does)
//    and *committed* later, in zxid order. Several writes, of several sessions
//    or pipelined from one, can be prepared and not yet committed.
//  - 3.8.0's suffix rule: suffix = the parent's latest pending cversion (or
//    the committed one); the pending cversion becomes suffix+1 (int32 wrap);
//    on commit the parent's cversion takes the new value only if larger, so
//    it saturates at 2147483647 (Options::wrap: always takes it).
//  - Per-session FIFO: a session's requests are served in the order sent; a
//    read waits for the session's earlier writes to commit; answers and watch
//    notifications share one delivery queue per session.
//  - One-shot exists watches; multi atomicity; connection loss with the
//    outcome of in-flight writes chosen by the caller; session expiry.
//
// Invariants: (1) commits apply in zxid order; (2) every prepared txn commits
// against a tree on which it was valid (checked: a violation is a model bug);
// (3) a session's deliveries are in request order.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace zklock::sim {

// splitmix64: a tiny seeded PRNG whose sequence is the same everywhere.
class Rng {
 public:
  explicit Rng(std::uint64_t seed) : s_(seed) {}
  std::uint64_t next() {
    std::uint64_t z = (s_ += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : next() % n; }  // [0, n)
  bool chance(std::uint32_t per_mille) { return below(1000) < per_mille; }

 private:
  std::uint64_t s_;
};

enum class Zrc { ok, no_node, node_exists, not_empty, bad_version, connection_loss, session_expired };
const char* zrc_name(Zrc rc);

enum class ReqKind { create, remove, multi_release, multi_revoke, set_data, get_children, exists, get_data, reap };

struct Request {
  std::uint64_t id = 0;       // unique, assigned by SimZk::send
  std::uint64_t session = 0;  // 0: the server itself (container reaper, detector)
  ReqKind kind = ReqKind::exists;
  std::string path;     // create: the prefix for sequential nodes
  std::string path2;    // multi_release: the lock path (setData); multi_revoke: the record path
  std::string data;
  bool sequential = false, ephemeral = false, container = false;
  bool watch = false;   // exists (a data watch); get_children (a children watch)
  std::int32_t version = -1;  // set_data: the expected version (-1: any)
  std::uint64_t cookie = 0;  // the driver's routing
  bool is_write() const { return kind != ReqKind::get_children && kind != ReqKind::exists && kind != ReqKind::get_data; }
};

struct Reply {
  bool notification = false;  // a watch fired (delete / data change / create)
  enum class Watch { deleted, changed, created, children } what = Watch::deleted;
  std::uint64_t cookie = 0;
  Zrc rc = Zrc::ok;
  std::string name;   // create: the child name
  std::int64_t czxid = 0;
  std::int64_t mzxid = 0;     // set_data: the transaction's zxid
  std::int32_t version = 0;   // set_data: the new version
  std::vector<std::string> children;
  std::string data;
};

// What happens to an unanswered write when its connection drops.
enum class LostFate { applied, dropped, later };

struct Node {
  std::string data;
  std::int64_t czxid = 0, mzxid = 0;
  std::int32_t version = 0;
  std::int32_t cversion = 0;
  std::uint64_t owner = 0;  // ephemeral owner session
  bool container = false;
  bool had_children = false;
  std::set<std::string> children;
};

class SimZk {
 public:
  struct Options {
    bool wrap = false;                  // cversion always takes the new value (no saturation)
    // 3.8.0 does not: a delete changes the parent's pzxid and child count,
    // never its cversion (PrepRequestProcessor's delete case, DataTree.deleteNode).
    bool delete_bumps_cversion = false;
  };
  struct Stats {
    std::uint64_t negative_suffixes = 0, duplicate_suffixes = 0, commits = 0, max_pipeline = 0;
    std::uint64_t overlapping_creates = 0;  // sequential creates prepared while the parent had a pending change
    // The most children-watch registrations one session held on one path at
    // once, unfired: the C client keeps a callback for each watching call
    // until the watch fires, so this must stay bounded.
    std::uint64_t max_child_watches = 0;
  };
  struct Deleted {  // one node deleted by a commit: for the driver's bookkeeping
    std::string path;
    std::uint64_t deleter_session;
    ReqKind cause;
    bool expiry;
    std::uint64_t cookie;  // of the request that deleted it
  };

  SimZk(Options opts, Rng& rng) : opts_(opts), rng_(rng) {}

  // Setup: create a node directly (persistent or container) with a given child counter.
  void seed_node(const std::string& path, bool container, std::int32_t cversion);

  std::uint64_t open_session();
  bool session_alive(std::uint64_t s) const;
  bool connected(std::uint64_t s) const;

  // Queues a request on a connected, alive session (or session 0).
  void send(Request req);
  // Server steps. serve(): the session's next request (a write is prepared; a
  // read is answered, once the session's earlier writes have committed).
  bool can_serve(std::uint64_t s) const;
  void serve(std::uint64_t s);
  bool can_commit() const { return !pipeline_.empty(); }
  void commit();
  void commit_all() {
    while (can_commit()) commit();
  }
  // The client takes the next answer/notification of a connected session.
  bool can_deliver(std::uint64_t s) const;
  Reply deliver(std::uint64_t s);
  // Connected, and nothing of the session is in flight: no request waits to
  // be served, committed or answered, and no answer or notification waits to
  // be delivered. Whatever its client does not know by now, nothing will tell it.
  bool quiet(std::uint64_t s) const;

  // Connection loss: returns the cookies of every request the client had not
  // yet been answered, in request order (each answered connection_loss by
  // the caller). fate(i) picks what happens to the i-th unanswered write.
  template <class Fate>
  std::vector<std::uint64_t> disconnect(std::uint64_t s, Fate fate);
  void reconnect(std::uint64_t s);
  // Expires a session: its ephemerals are deleted in one transaction (after
  // the pending ones), its watches go. Limbo writes are dropped.
  void expire(std::uint64_t s);
  void close(std::uint64_t s) { expire(s); }

  const Node* find(const std::string& path) const;
  const std::map<std::string, Node>& tree() const { return tree_; }
  std::int64_t zxid() const { return zxid_; }
  std::size_t pipeline_size() const { return pipeline_.size(); }
  const Stats& stats() const { return stats_; }
  // Nodes deleted since the last call.
  std::vector<Deleted> take_deleted() { return std::exchange(deleted_, {}); }

 private:
  struct Pending {  // a path's latest uncommitted state (ZooKeeper's outstandingChanges)
    bool exists = false;
    std::int32_t cversion = 0;
    std::int32_t children = 0;
    std::uint64_t owner = 0;
    std::int64_t zxid = 0;
    std::int32_t version = 0;  // data version
  };
  struct Op {
    enum Kind { create, remove, set_data } kind;
    std::string path;
    std::string data;
    std::uint64_t owner = 0;
    bool container = false;
    std::int32_t parent_cversion = 0;  // create/remove: the parent's new cversion
  };
  struct Txn {
    std::int64_t zxid = 0;
    Request req;
    Zrc rc = Zrc::ok;
    std::vector<Op> ops;
    bool close_session = false;
    bool answer = true;  // false once the session's connection dropped
    std::string created_name;
    std::int32_t new_version = 0;  // set_data
    std::vector<std::string> touched;  // paths whose pending state this txn set
  };
  struct Watch {
    std::uint64_t session, cookie;
    bool confirmed;  // its answer reached the client (survives a disconnect)
  };
  struct Session {
    bool alive = true, connected = true;
    std::deque<Request> outbound;  // sent, not yet served
    std::deque<Request> limbo;     // lost writes applied after the next read
    std::set<std::uint64_t> unanswered;  // request ids the client waits for
    std::deque<std::pair<std::uint64_t, Reply>> deliveries;  // (request id or 0, reply)
    int uncommitted = 0;
    std::set<std::string> ephemerals;
    std::map<std::uint64_t, std::pair<std::string, bool>> watch_paths;  // watching reads not yet answered (path, children?)
  };

  std::optional<Pending> effective(const std::string& path, const std::map<std::string, Pending>& scratch) const;
  void prepare(const Request& req);
  Zrc prepare_ops(const Request& req, Txn& txn, std::map<std::string, Pending>& scratch);
  Zrc prep_create(const std::string& path, const Request& req, bool sequential, bool ephemeral, bool container,
                  Txn& txn, std::map<std::string, Pending>& scratch);
  Zrc prep_delete(const std::string& path, bool only_container, Txn& txn, std::map<std::string, Pending>& scratch);
  void apply(const Op& op, const Txn& t);
  void fire(const std::string& path, Reply::Watch what);
  void fire_children(const std::string& parent);
  void answer(std::uint64_t s, std::uint64_t req_id, Reply r);
  void serve_read(const Request& req);

  Options opts_;
  Rng& rng_;
  std::map<std::string, Node> tree_;
  std::map<std::string, Pending> pending_;
  std::deque<Txn> pipeline_;
  std::map<std::uint64_t, Session> sessions_;
  std::map<std::string, std::vector<Watch>> watches_;        // data watches (exists)
  std::map<std::string, std::vector<Watch>> child_watches_;  // children watches (getChildren)
  std::vector<Deleted> deleted_;
  std::int64_t zxid_ = 0;
  std::uint64_t next_session_ = 0, next_req_ = 0;
  Stats stats_;
};

template <class Fate>
std::vector<std::uint64_t> SimZk::disconnect(std::uint64_t s, Fate fate) {
  auto& ss = sessions_.at(s);
  std::vector<std::uint64_t> lost;  // cookies, in request order
  // Unserved requests: reads vanish; writes are applied now, dropped, or later.
  std::deque<Request> outbound = std::exchange(ss.outbound, {});
  std::vector<std::pair<std::uint64_t, std::uint64_t>> order;  // (req id, cookie)
  for (auto& [id, r] : ss.deliveries) {
    if (id != 0 && ss.unanswered.count(id)) order.emplace_back(id, r.cookie);
  }
  for (auto& t : pipeline_) {
    if (t.req.session == s && t.answer) {
      order.emplace_back(t.req.id, t.req.cookie);
      t.answer = false;
    }
  }
  for (auto& r : outbound) {
    order.emplace_back(r.id, r.cookie);
    if (!r.is_write()) continue;
    switch (fate()) {
      case LostFate::applied: prepare(r); pipeline_.back().answer = false; break;
      case LostFate::dropped: break;
      case LostFate::later: ss.limbo.push_back(r); break;
    }
  }
  std::sort(order.begin(), order.end());  // request ids grow in send order
  for (auto& [id, cookie] : order) lost.push_back(cookie);
  ss.unanswered.clear();
  // Answers not yet taken are lost with the connection; notifications of
  // confirmed watches stay (re-registered watches fire again on reconnect).
  std::erase_if(ss.deliveries, [](const auto& d) { return d.first != 0; });
  for (auto* table : {&watches_, &child_watches_}) {
    for (auto& [path, ws] : *table) {
      std::erase_if(ws, [&](const Watch& w) { return w.session == s && !w.confirmed; });
    }
  }
  ss.connected = false;
  return lost;
}

}  // namespace zklock::sim
