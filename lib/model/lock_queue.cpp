#include "model/lock_queue.hpp"

#include <algorithm>
#include <deque>
#include <unordered_set>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/strong_components.hpp>

#include "model/queue_order.hpp"
#include "zklock/path.hpp"

namespace zklock::model {

std::optional<QueueNode> queue_node_from_name(std::string_view child_name) {
  auto parsed = protocol::parse_lock_node_name(child_name);
  if (!parsed) return std::nullopt;
  QueueNode n;
  n.name = std::move(parsed->name);
  n.mode = parsed->mode;
  n.owner_key = std::move(parsed->owner_key);
  n.sequence = parsed->sequence;
  return n;
}

std::string node_path(const std::string& lock, const std::string& name) {
  return join_path(lock, name);
}

bool sort_queue(std::vector<QueueNode>& nodes) {
  return sort_by_creation(nodes, [](const QueueNode& n) { return OrderKey{n.sequence, n.czxid, n.name}; });
}

bool names_owner(std::string_view owner, std::string_view key) { return !owner.empty() && protocol::owner_key(owner) == key; }

std::string unknown_owner(std::string_view key) { return "owner-key:" + std::string(key); }

bool abandoned_wait(const QueueNode& n, std::int64_t now_ms, std::chrono::milliseconds skew) noexcept {
  if (n.gives_up_after_ms <= 0 || n.ctime_ms == 0) return false;
  // Compared as a difference: the stated timeout is untrusted data and may be huge.
  const auto age = now_ms - n.ctime_ms;
  return age > 0 && age - skew.count() > n.gives_up_after_ms;
}

namespace {

// Where analyze_queue's waits go. With Waits::all, into the graph at once;
// with Waits::on_cycles, kept by reference (the strings stay in names_)
// until every queue is in, then only those inside a strongly connected
// component of owners go in (finish()).
class WaitSink {
 public:
  explicit WaitSink(AnalyzeOptions::Waits waits) : waits_(waits) {}
  // A queue's owners and node paths, kept while its waits may be pending.
  const std::vector<std::string>& keep(std::vector<std::string> v) { return names_.emplace_back(std::move(v)); }
  std::uint32_t id(const std::string& owner) {
    return ids_.try_emplace(owner, static_cast<std::uint32_t>(ids_.size())).first->second;
  }
  void add(WaitForGraph& g, const std::string* parts[5], EdgeKind kind, std::uint32_t w, std::uint32_t b) {
    if (waits_ == AnalyzeOptions::Waits::all) {
      g.add_wait(Wait{*parts[0], *parts[1], *parts[2], *parts[3], *parts[4], kind});
      return;
    }
    pending_.push_back(Pending{{parts[0], parts[1], parts[2], parts[3], parts[4]}, kind, w, b});
  }
  void finish(WaitForGraph& g) {
    if (pending_.empty()) return;
    using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
    Graph owners(ids_.size());
    for (const auto& p : pending_) boost::add_edge(p.w, p.b, owners);
    std::vector<std::size_t> component(ids_.size());
    const auto count = boost::strong_components(
        owners, boost::make_iterator_property_map(component.begin(), boost::get(boost::vertex_index, owners)));
    std::vector<std::size_t> size(count, 0);
    for (const auto c : component) ++size[c];
    for (const auto& p : pending_) {
      if (p.w != p.b && (component[p.w] != component[p.b] || size[component[p.w]] < 2)) continue;
      g.add_wait(Wait{*p.parts[0], *p.parts[1], *p.parts[2], *p.parts[3], *p.parts[4], p.kind});
    }
  }

 private:
  struct Pending {
    const std::string* parts[5];  // waiter, blocker, lock, waiter node, blocker node
    EdgeKind kind;
    std::uint32_t w, b;
  };
  AnalyzeOptions::Waits waits_;
  std::deque<std::vector<std::string>> names_;
  std::unordered_map<std::string, std::uint32_t> ids_;
  std::vector<Pending> pending_;
};

// Adds one queue's nodes, holders, waiters and waits to `out` (the waits
// through `sink`). `owner_of` maps an owner key to its resolved owner id.
template <class OwnerOf>
void analyze_queue(const LockQueue& q, const OwnerOf& owner_of, const AnalyzeOptions& options, WaitSink& sink,
                   WaitAnalysis& out) {
  if (q.nodes.empty()) return;
  ++out.locks;
  auto nodes = q.nodes;
  sort_queue(nodes);

  const auto mode = [](const QueueNode& n) { return n.mode; };
  const std::vector<bool> holds = holders(nodes, mode);
  std::vector<std::string> owner_v(nodes.size()), path_v(nodes.size());
  std::vector<bool> abandoned(nodes.size(), false);
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    owner_v[i] = owner_of(nodes[i].owner_key);
    path_v[i] = node_path(q.path, nodes[i].name);
  }
  const auto& owners = sink.keep(std::move(owner_v));
  const auto& paths = sink.keep(std::move(path_v));
  std::vector<std::uint32_t> ids(nodes.size());
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    ids[i] = sink.id(owners[i]);

    abandoned[i] = !holds[i] && abandoned_wait(nodes[i], options.now_ms, options.abandon_skew);
    out.abandoned += abandoned[i] ? 1 : 0;
    NodeInfo info{paths[i],     q.path,           owners[i],      nodes[i].mode,     holds[i],
                  abandoned[i], nodes[i].priority, nodes[i].czxid, nodes[i].ctime_ms};
    out.nodes.insert_or_assign(paths[i], std::move(info));
    auto& owner = out.owners[owners[i]];
    if (owner.owner_key.empty()) owner.owner_key = nodes[i].owner_key;
    (holds[i] ? owner.held : owner.waiting).push_back(paths[i]);
    ++(holds[i] ? out.holders : out.waiters);
  }

  // Holders are a prefix (queue_order.hpp): the first waiter follows them.
  const auto first_waiter = static_cast<std::size_t>(std::find(holds.begin(), holds.end(), false) - holds.begin());
  if (first_waiter < nodes.size()) {
    out.heads.push_back(QueueHead{q.path, paths[0], owners[0], nodes[0].mode, nodes[0].czxid, nodes[0].ctime_ms,
                                  nodes[first_waiter].ctime_ms, first_waiter, nodes.size() - first_waiter});
  }

  const auto min_wait_ms = options.min_wait.count();
  std::size_t edges = 0;
  std::unordered_set<std::uint32_t> seen;  // per waiter, cleared: its buckets are reused across the queue
  for (std::size_t i = 0; i < nodes.size(); ++i) {
    if (holds[i]) continue;
    const auto& n = nodes[i];
    if (n.ctime_ms == 0) continue;  // stat not known yet: age unknown
    const auto age = options.now_ms - n.ctime_ms;
    out.oldest_wait_ms = std::max(out.oldest_wait_ms, age);
    if (age < min_wait_ms) continue;
    // Its owner gave up waiting; only its delete is pending. An edge from it
    // would claim a wait nobody has.
    if (abandoned[i]) continue;
    if (edges >= options.max_queue_edges) {
      ++out.truncated_waiters;
      continue;
    }
    // One edge per distinct blocking owner: its first node in the queue,
    // which is a holder whenever the owner holds here (hard edges first).
    seen.clear();
    for (std::size_t j = 0; j < i; ++j) {
      if (!blocks(n.mode, nodes[j].mode)) continue;
      if (!seen.insert(ids[j]).second) continue;
      const std::string* parts[5] = {&owners[i], &owners[j], &q.path, &paths[i], &paths[j]};  // q outlives finish()
      sink.add(out.graph, parts, holds[j] ? EdgeKind::hard : EdgeKind::soft, ids[i], ids[j]);
      ++edges;
    }
  }
}

}  // namespace

WaitAnalysis analyze_queues(const std::vector<LockQueue>& queues, const AnalyzeOptions& options) {
  WaitAnalysis out;

  // One owner id per owner key: from valid data when any node has it.
  std::unordered_map<std::string, std::string> owner_by_key;
  for (const auto& q : queues) {
    for (const auto& n : q.nodes) {
      if (!names_owner(n.owner, n.owner_key)) continue;
      auto [it, inserted] = owner_by_key.try_emplace(n.owner_key, n.owner);
      if (!inserted && n.owner < it->second) it->second = n.owner;
    }
  }
  auto owner_of = [&](const std::string& key) {
    auto it = owner_by_key.find(key);
    return it != owner_by_key.end() ? it->second : unknown_owner(key);
  };
  WaitSink sink(options.waits);
  for (const auto& q : queues) analyze_queue(q, owner_of, options, sink, out);
  sink.finish(out.graph);
  return out;
}

WaitAnalysis analyze_snapshot(const QueueSnapshot& snapshot, const AnalyzeOptions& options) {
  WaitAnalysis out;
  // snapshot.keys covers every key in the contended queues, and its owner
  // was resolved over all the key's nodes, lone ones included.
  auto owner_of = [&](const std::string& key) {
    auto it = snapshot.keys.find(key);
    return it != snapshot.keys.end() && !it->second.owner.empty() ? it->second.owner : unknown_owner(key);
  };
  WaitSink sink(options.waits);
  for (const auto& q : snapshot.contended) analyze_queue(q, owner_of, options, sink, out);
  sink.finish(out.graph);
  // A lone node holds and waits for nothing: one lock, one holder each.
  out.locks += snapshot.lone_queues;
  out.holders += snapshot.lone_queues;
  for (const auto& [key, facts] : snapshot.keys) {
    if (facts.held_alone == 0) continue;
    if (auto it = out.owners.find(owner_of(key)); it != out.owners.end()) it->second.held_alone = facts.held_alone;
  }
  return out;
}

}  // namespace zklock::model
