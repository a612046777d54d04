// zklock graph [--format text|dot|svg|json]: the whole wait-for graph — who
// holds which lock, who waits for it, the owner-to-owner waits derived from
// the queues by the detector's code, and the cycles among them.
//
// The dot rendering shows owners (boxes) and locks (ellipses): a hold is a
// solid bold edge lock -> owner, a wait a dashed edge owner -> lock; the
// edges that form a cycle are red. svg is that DOT laid out by Graphviz's
// dot engine in-process (model/wait_for_graph_draw.hpp, the renderer of the
// detector's status page): no `dot` program needed.
#include <iostream>
#include <map>
#include <set>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "cli/lock_tree.hpp"
#include "model/wait_for_graph_draw.hpp"

namespace zklock::cli {
namespace {

struct GraphOptions {
  std::string path;
  std::string format = "text";
};

using model::dot_quote;

// One owner's node on one lock: a hold or a wait.
struct Link {
  std::string lock, owner, node;
  Mode mode;
  bool holds;
  std::int64_t age_ms;
};

std::vector<Link> links(const std::vector<LockView>& locks, const model::WaitAnalysis& a, std::int64_t now) {
  std::vector<Link> out;
  for (const auto& l : locks) {
    for (const auto& n : l.nodes) {
      const auto& info = a.nodes.at(n.path);
      out.push_back({l.path, info.owner, n.path, info.mode, info.holds, std::max<std::int64_t>(0, now - n.stat.ctime)});
    }
  }
  return out;
}

std::string render_dot(const std::vector<Link>& ls, const model::WaitForGraph& graph,
                       const std::vector<model::Cycle>& cycles, const std::vector<Unreadable>& unreadable) {
  // Cycle nodes: the waiting node and the node it waits for, on each step.
  std::set<std::string> cycle_nodes;
  for (const auto& c : cycles) {
    for (const auto& w : c.waits) {
      cycle_nodes.insert(w.waiter_node);
      cycle_nodes.insert(w.blocker_node);
    }
  }
  std::set<std::string> owners, lock_names;
  for (const auto& l : ls) {
    owners.insert(l.owner);
    lock_names.insert(l.lock);
  }
  for (const auto& o : graph.owners()) owners.insert(o);
  std::string out = "digraph zklock {\n  rankdir=LR;\n";
  for (const auto& o : owners) out += "  " + dot_quote("owner:" + o) + " [shape=box, label=" + dot_quote(o) + "];\n";
  for (const auto& l : lock_names) {
    out += "  " + dot_quote("lock:" + l) + " [shape=ellipse, style=filled, fillcolor=lightgrey, label=" +
           dot_quote(l) + "];\n";
  }
  for (const auto& l : ls) {
    const bool red = cycle_nodes.count(l.node) > 0;
    std::string attrs = l.holds ? "label=\"holds\", style=bold" : "label=\"waits\", style=dashed";
    if (l.mode == Mode::shared) attrs += ", arrowhead=empty";
    if (red) attrs += ", color=red, fontcolor=red, penwidth=2";
    if (l.holds) {
      out += "  " + dot_quote("lock:" + l.lock) + " -> " + dot_quote("owner:" + l.owner) + " [" + attrs + "];\n";
    } else {
      out += "  " + dot_quote("owner:" + l.owner) + " -> " + dot_quote("lock:" + l.lock) + " [" + attrs + "];\n";
    }
  }
  // What could not be read: a dashed note each, so the picture says it is partial.
  for (const auto& u : unreadable) {
    out += "  " + dot_quote("unreadable:" + u.path) + " [shape=note, style=dashed, color=grey40, label=" +
           dot_quote(u.path + "\nunreadable: " + u.reason) + "];\n";
  }
  out += "}\n";
  return out;
}

void run_graph(const GlobalOptions& g, const GraphOptions& o) {
  const std::string format = g.json ? "json" : o.format;
  const std::string path = o.path.empty() ? resolve_path(g.root, "/") : resolve_path(o.path, g.root);
  auto client = connect(g);
  if (!o.path.empty() && !client->try_stat(path)) throw CliError(exit_code::no_such, "no such path: " + path);
  const auto tree = read_tree(*client, path);
  const auto& locks = tree.locks;
  const auto now = now_ms();
  const auto analysis = analyze(locks, std::chrono::milliseconds::zero(), now);
  const auto cycles = analysis.graph.cycles();
  const auto ls = links(locks, analysis, now);

  if (format == "dot" || format == "svg") {
    const auto dot = render_dot(ls, analysis.graph, cycles, tree.unreadable);
    std::cout << (format == "svg" ? model::render_svg(dot) : dot);
    warn_if_partial(tree);
    return;
  }
  if (format == "json") {
    nlohmann::json j{{"root", path},
                     {"locks", nlohmann::json::array()},
                     {"owners", nlohmann::json::array()},
                     {"waits", nlohmann::json::array()},
                     {"cycles", nlohmann::json::array()}};
    std::map<std::string, nlohmann::json> by_lock;
    for (const auto& l : locks) by_lock[l.path] = {{"path", l.path}, {"holders", nlohmann::json::array()},
                                                     {"waiters", nlohmann::json::array()}};
    std::set<std::string> owners;
    for (const auto& l : ls) {
      owners.insert(l.owner);
      nlohmann::json e{{"owner", l.owner}, {"node", l.node}, {"mode", mode_name(l.mode)}, {"age_ms", l.age_ms}};
      by_lock[l.lock][l.holds ? "holders" : "waiters"].push_back(std::move(e));
    }
    for (auto& [_, lj] : by_lock) j["locks"].push_back(std::move(lj));
    j["owners"] = owners;
    for (const auto& w : analysis.graph.waits()) j["waits"].push_back(model::wait_json(w));
    for (const auto& c : cycles) j["cycles"].push_back(model::cycle_json(c));
    add_unreadable_json(j, tree);
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return;
  }
  // text
  warn_if_partial(tree);
  std::cout << locks.size() << (locks.size() == 1 ? " lock, " : " locks, ") << analysis.holders << " held, "
            << analysis.waiters << " waiting\n";
  for (const auto& l : locks) {
    if (l.nodes.empty()) continue;
    std::cout << l.path << "\n";
    for (const auto& k : ls) {
      if (k.lock != l.path) continue;
      std::cout << "  " << (k.holds ? "held by    " : "waited by  ") << k.owner << "  (" << mode_name(k.mode) << ", "
                << humanize_age(std::chrono::milliseconds(k.age_ms)) << ")\n";
    }
  }
  const auto waits = analysis.graph.waits();
  std::cout << waits.size() << (waits.size() == 1 ? " wait\n" : " waits\n");
  for (const auto& w : waits) {
    std::cout << "  " << w.waiter << " waits for " << w.blocker << " on " << w.lock << " ("
              << model::edge_kind_name(w.kind) << ")\n";
  }
  std::cout << cycles.size() << (cycles.size() == 1 ? " cycle\n" : " cycles\n");
  for (const auto& c : cycles) std::cout << "  cycle: " << model::cycle_text(c) << "\n";
  std::cout << unreadable_text(tree);
}

}  // namespace

void set_graph_command(CLI::App* app, Context& ctx) {
  auto opts = std::make_shared<GraphOptions>();
  auto* sub = app->add_subcommand("graph", "Show the whole wait-for graph: holds, waits and cycles "
                                           "(a picture: zklock graph --format svg > g.svg)");
  sub->add_option("path", opts->path, "Where to look (absolute, or relative to --root); default: the root");
  sub->add_option("--format", opts->format, "text, dot (Graphviz), svg (laid out by Graphviz) or json (same as --json)")
      ->check(CLI::IsMember({"text", "dot", "svg", "json"}))
      ->capture_default_str();
  sub->callback([&ctx, opts] { run_graph(ctx.global, *opts); });
}

}  // namespace zklock::cli
