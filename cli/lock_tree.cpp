#include "cli/lock_tree.hpp"

#include <algorithm>
#include <condition_variable>
#include <iostream>
#include <memory>
#include <mutex>

#include <nlohmann/json.hpp>

#include "cli/common.hpp"
#include "model/queue_order.hpp"
#include "zklock/error.hpp"
#include "zklock/protocol/paths.hpp"

namespace zklock::cli {
namespace {

using std::chrono::milliseconds;

// Collects the answers of pipelined gets. Shared with the callbacks, so an
// answer arriving after the caller gave up touches only this object.
struct GetBatch {
  std::mutex mu;
  std::condition_variable cv;
  std::size_t pending = 0;            // GUARDED_BY(mu)
  std::vector<NodeView> nodes;        // GUARDED_BY(mu); index = request order
  std::vector<bool> present;          // GUARDED_BY(mu)
  std::optional<Status> failure;      // GUARDED_BY(mu): first error other than no_node
  std::size_t failed = 0;             // GUARDED_BY(mu): the request it was for
};

// A lock node that could not be read: the error, and the node's name.
struct NodeReadError : Error {
  NodeReadError(Error e, std::string name) : Error(std::move(e)), node(std::move(name)) {}
  std::string node;
};

// Reads stat and data of `names` under `parent`. Vanished nodes are dropped;
// any other failure is thrown as NodeReadError.
std::vector<NodeView> read_nodes(Client& client, const std::string& parent,
                                 const std::vector<std::string>& names) {
  auto batch = std::make_shared<GetBatch>();
  batch->nodes.resize(names.size());
  batch->present.assign(names.size(), false);
  batch->pending = names.size();
  for (std::size_t i = 0; i < names.size(); ++i) {
    auto& n = batch->nodes[i];
    n.name = names[i];
    n.path = model::node_path(parent, names[i]);
    n.parsed = protocol::parse_lock_node_name(names[i]);
    client.get_async(n.path, {}, [batch, i](Status st, std::string data, const Stat& stat) {
      std::lock_guard lk(batch->mu);
      if (st.ok()) {
        batch->nodes[i].stat = stat;
        batch->nodes[i].data = protocol::decode_node_data(data);
        batch->present[i] = true;
      } else if (!st.is(Errc::no_node) && !batch->failure) {
        batch->failure = st;
        batch->failed = i;
      }
      if (--batch->pending == 0) batch->cv.notify_all();
    });
  }
  // Every request is answered: by the server, or with connection loss once
  // the client gives up on it. The bound only guards against a bug there.
  const auto bound = client.options().session_timeout * 2 + std::chrono::seconds(5);
  std::unique_lock lk(batch->mu);
  if (!batch->cv.wait_for(lk, bound, [&] { return batch->pending == 0; })) {
    throw Error(Errc::operation_timeout, "reading the children of " + parent + ": no answer");
  }
  if (batch->failure) {
    const auto& failed = batch->nodes[batch->failed];
    throw NodeReadError(batch->failure->error("reading " + failed.path), failed.name);
  }
  std::vector<NodeView> out;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (batch->present[i]) out.push_back(std::move(batch->nodes[i]));
  }
  return out;
}

LockView build_lock(Client& client, const std::string& path, const std::vector<std::string>& children) {
  LockView lock;
  lock.path = path;
  std::vector<std::string> ours;
  for (const auto& c : children) {
    if (protocol::parse_lock_node_name(c)) {
      ours.push_back(c);
    } else {
      NodeView f;
      f.name = c;
      f.path = model::node_path(path, c);
      lock.foreign.push_back(std::move(f));
    }
  }
  std::sort(lock.foreign.begin(), lock.foreign.end(),
            [](const NodeView& a, const NodeView& b) { return a.name < b.name; });
  auto nodes = read_nodes(client, path, ours);
  // Creation order, exactly as the recipe and the detector see it (every
  // czxid is known here: the gets read each node's stat).
  model::sort_by_creation(
      nodes, [](const NodeView& n) { return model::OrderKey{n.parsed->sequence, n.stat.czxid, n.name}; });
  lock.nodes = std::move(nodes);
  return lock;
}

// A lock path is a node with zklock children, or an empty leaf (an idle lock
// parent) — unless its parent is a lock: then it is a foreign child.
void walk(Client& client, const std::string& path, bool is_root, bool parent_is_lock, int depth, TreeView& out) {
  if (path == "/zookeeper" || path == protocol::kMetadataRoot) return;
  std::vector<std::string> children;
  try {
    children = client.children(path);
  } catch (const Error& e) {
    if (e.code() == Errc::no_node) return;  // gone since its parent was listed
    if (e.code() != Errc::no_auth) throw;
    out.unreadable.push_back({path, std::string(errc_name(e.code())), "no permission to list its children (NOAUTH)"});
    return;
  }
  std::sort(children.begin(), children.end());
  const bool has_lock_nodes = std::any_of(children.begin(), children.end(),
                                          [](const std::string& c) { return protocol::parse_lock_node_name(c).has_value(); });
  if (has_lock_nodes || (children.empty() && !is_root && !parent_is_lock)) {
    try {
      out.locks.push_back(build_lock(client, path, children));
    } catch (const NodeReadError& e) {
      if (e.code() != Errc::no_auth) throw;
      out.unreadable.push_back({path, std::string(errc_name(e.code())),
                                "no permission to read its node " + e.node + " (NOAUTH)"});
    }
  }
  if (depth >= 64) return;  // deeper trees are not lock trees
  for (const auto& c : children) {
    if (protocol::parse_lock_node_name(c)) continue;  // ephemeral: no children
    walk(client, model::node_path(path, c), false, has_lock_nodes, depth + 1, out);
  }
}

}  // namespace

LockView read_lock(Client& client, const std::string& lock_path) {
  auto children = client.children(lock_path);  // throws no_node
  return build_lock(client, lock_path, children);
}

LockView read_lock_or_exit(Client& client, const std::string& lock_path, const std::string& missing) {
  try {
    return read_lock(client, lock_path);
  } catch (const Error& e) {
    if (e.code() == Errc::no_node) throw CliError(exit_code::no_such, missing);
    throw;
  }
}

TreeView read_tree(Client& client, const std::string& root) {
  TreeView out;
  walk(client, root, true, false, 0, out);
  std::sort(out.locks.begin(), out.locks.end(), [](const LockView& a, const LockView& b) { return a.path < b.path; });
  std::sort(out.unreadable.begin(), out.unreadable.end(),
            [](const Unreadable& a, const Unreadable& b) { return a.path < b.path; });
  return out;
}

void add_unreadable_json(nlohmann::json& j, const TreeView& tree) {
  j["complete"] = tree.complete();
  j["unreadable"] = nlohmann::json::array();
  for (const auto& u : tree.unreadable) {
    j["unreadable"].push_back({{"path", u.path}, {"error", u.error}, {"reason", u.reason}});
  }
}

void warn_if_partial(const TreeView& tree) {
  if (tree.complete()) return;
  const auto n = tree.unreadable.size();
  std::cerr << "zklock: warning: partial view: " << n << (n == 1 ? " path" : " paths") << " could not be read\n";
}

std::string unreadable_text(const TreeView& tree) {
  std::string out;
  for (const auto& u : tree.unreadable) out += "unreadable: " + u.path + ": " + u.reason + "\n";
  return out;
}

model::LockQueue to_queue(const LockView& lock) {
  model::LockQueue q;
  q.path = lock.path;
  for (const auto& n : lock.nodes) {
    auto qn = model::queue_node_from_name(n.name);
    if (!qn) continue;
    if (n.data) {
      qn->owner = n.data->owner;
      qn->priority = n.data->priority;
      // Only data that names the node's owner states its timeout (the
      // detector's mirror trusts the same data, mirror_apply.cpp).
      if (model::names_owner(n.data->owner, qn->owner_key)) qn->gives_up_after_ms = n.data->gives_up_after_ms;
    }
    qn->czxid = n.stat.czxid;
    qn->ctime_ms = n.stat.ctime;
    q.nodes.push_back(std::move(*qn));
  }
  return q;
}

model::WaitAnalysis analyze(const std::vector<LockView>& locks, milliseconds min_wait, std::int64_t now) {
  std::vector<model::LockQueue> queues;
  queues.reserve(locks.size());
  std::int64_t newest = 0;
  for (const auto& l : locks) {
    queues.push_back(to_queue(l));
    for (const auto& n : l.nodes) newest = std::max(newest, n.stat.ctime);
  }
  model::AnalyzeOptions opts;
  // Ages come from the server's ctime; a client clock behind the server's
  // must not make fresh waits look younger than zero and hide them.
  opts.now_ms = std::max(now, newest);
  opts.min_wait = min_wait;
  return model::analyze_queues(queues, opts);
}

std::optional<std::string> read_ensemble_id(Client& client) {
  auto id = client.try_get(std::string(protocol::kEnsembleIdPath));
  if (!id || id->empty()) return std::nullopt;
  return id;
}

}  // namespace zklock::cli
