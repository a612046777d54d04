#include "model/wait_for_graph.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <set>
#include <tuple>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/strong_components.hpp>
#include <nlohmann/json.hpp>

namespace zklock::model {
namespace {

auto wait_order_key(const Wait& w) {
  return std::tie(w.waiter, w.blocker, w.lock, w.waiter_node, w.blocker_node);
}

}  // namespace

std::string_view edge_kind_name(EdgeKind k) noexcept { return k == EdgeKind::soft ? "soft" : "hard"; }

std::vector<std::string> Cycle::owners() const {
  std::vector<std::string> out;
  out.reserve(waits.size());
  for (const auto& w : waits) out.push_back(w.waiter);
  return out;
}

std::vector<std::string> Cycle::node_paths() const {
  std::set<std::string> paths;
  for (const auto& w : waits) {
    paths.insert(w.waiter_node);
    paths.insert(w.blocker_node);
  }
  return {paths.begin(), paths.end()};
}

std::string cycle_text(const Cycle& cycle) {
  if (cycle.waits.empty()) return {};
  std::string out = cycle.waits.front().waiter;
  for (const auto& w : cycle.waits) {
    out += w.kind == EdgeKind::soft ? " ~[" : " -[";
    out += w.lock;
    out += w.kind == EdgeKind::soft ? "]~> " : "]-> ";
    out += w.blocker;
  }
  return out;
}

std::size_t WaitForGraph::vertex(const std::string& owner) {
  auto [it, inserted] = ids_.try_emplace(owner, names_.size());
  if (inserted) names_.push_back(owner);
  return it->second;
}

void WaitForGraph::add_wait(const Wait& wait) {
  std::string key;
  for (const auto* part : {&wait.waiter, &wait.blocker, &wait.lock, &wait.waiter_node, &wait.blocker_node}) {
    key += *part;
    key += '\0';
  }
  if (!edge_keys_.try_emplace(std::move(key), edges_.size()).second) return;
  const auto w = vertex(wait.waiter);
  const auto b = vertex(wait.blocker);
  edges_.push_back(Edge{w, b, wait});
}

std::vector<std::string> WaitForGraph::owners() const {
  auto out = names_;
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<std::size_t> WaitForGraph::sorted_edges() const {
  std::vector<std::size_t> order(edges_.size());
  for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
  std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
    const auto& x = edges_[a].wait;
    const auto& y = edges_[b].wait;
    // Hard edges first among otherwise equal pairs, so cycles prefer them.
    return std::tie(x.waiter, x.blocker, x.kind, x.lock, x.waiter_node, x.blocker_node) <
           std::tie(y.waiter, y.blocker, y.kind, y.lock, y.waiter_node, y.blocker_node);
  });
  return order;
}

std::vector<Wait> WaitForGraph::waits() const {
  std::vector<Wait> out;
  out.reserve(edges_.size());
  for (const auto& e : edges_) out.push_back(e.wait);
  std::sort(out.begin(), out.end(),
            [](const Wait& a, const Wait& b) { return wait_order_key(a) < wait_order_key(b); });
  return out;
}

std::vector<Cycle> WaitForGraph::cycles() const {
  const std::size_t n = names_.size();
  if (n == 0) return {};

  using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::directedS>;
  Graph g(n);
  for (const auto& e : edges_) boost::add_edge(e.waiter, e.blocker, g);
  std::vector<std::size_t> component(n);
  const auto count = boost::strong_components(
      g, boost::make_iterator_property_map(component.begin(), boost::get(boost::vertex_index, g)));

  // Adjacency in a deterministic order (by blocker id, hard first, lock...).
  std::vector<std::vector<std::size_t>> out_edges(n);
  for (auto idx : sorted_edges()) out_edges[edges_[idx].waiter].push_back(idx);

  std::vector<std::vector<std::size_t>> members(count);
  for (std::size_t v = 0; v < n; ++v) members[component[v]].push_back(v);

  std::vector<Cycle> result;
  for (auto& vs : members) {
    std::sort(vs.begin(), vs.end(), [&](std::size_t a, std::size_t b) { return names_[a] < names_[b]; });
    // A self-loop is the shortest cycle there is: report it first.
    const Edge* self = nullptr;
    for (auto v : vs) {
      for (auto idx : out_edges[v]) {
        if (edges_[idx].blocker == v) {
          self = &edges_[idx];
          break;
        }
      }
      if (self) break;
    }
    if (self) {
      result.push_back(Cycle{{self->wait}});
      continue;
    }
    if (vs.size() < 2) continue;

    // Shortest cycle through the smallest owner: BFS inside the component.
    const std::size_t start = vs.front();
    const auto comp = component[start];
    std::vector<std::size_t> via(n, SIZE_MAX);  // edge index that reached the vertex
    std::vector<bool> seen(n, false);
    std::deque<std::size_t> queue{start};
    seen[start] = true;
    std::size_t closing = SIZE_MAX;
    while (!queue.empty() && closing == SIZE_MAX) {
      const auto v = queue.front();
      queue.pop_front();
      for (auto idx : out_edges[v]) {
        const auto b = edges_[idx].blocker;
        if (component[b] != comp) continue;
        if (b == start) {
          closing = idx;
          break;
        }
        if (!seen[b]) {
          seen[b] = true;
          via[b] = idx;
          queue.push_back(b);
        }
      }
    }
    if (closing == SIZE_MAX) continue;  // cannot happen in a strong component
    Cycle c;
    for (auto idx = closing;;) {
      c.waits.push_back(edges_[idx].wait);
      const auto from = edges_[idx].waiter;
      if (from == start) break;
      idx = via[from];
    }
    std::reverse(c.waits.begin(), c.waits.end());
    result.push_back(std::move(c));
  }
  std::sort(result.begin(), result.end(), [](const Cycle& a, const Cycle& b) {
    return wait_order_key(a.waits.front()) < wait_order_key(b.waits.front());
  });
  return result;
}

nlohmann::json wait_json(const Wait& w) {
  return {{"waiter", w.waiter},           {"blocker", w.blocker},
          {"lock", w.lock},               {"waiter_node", w.waiter_node},
          {"blocker_node", w.blocker_node}, {"kind", edge_kind_name(w.kind)}};
}

nlohmann::json cycle_json(const Cycle& c) {
  nlohmann::json j{{"text", cycle_text(c)}, {"owners", c.owners()}, {"waits", nlohmann::json::array()}};
  for (const auto& w : c.waits) j["waits"].push_back(wait_json(w));
  return j;
}

nlohmann::json revocation_json(const std::string& path, const protocol::RevocationRecord& r) {
  nlohmann::json cycle = nlohmann::json::array();
  for (const auto& c : r.cycle) cycle.push_back({{"owner", c.owner}, {"lock", c.lock}, {"node", c.node}});
  return {{"record", path},
          {"victim_node", r.victim_node},
          {"victim_owner", r.victim_owner},
          {"victim_token", r.victim_token},
          {"cycle", std::move(cycle)},
          {"cycle_text", protocol::cycle_text(r)},
          {"policy", r.policy},
          {"mode", r.mode},
          {"by", r.detector},
          {"time_ms", r.time_ms},
          {"reason", r.reason}};
}

}  // namespace zklock::model
