#include "model/wait_for_graph_draw.hpp"

#include <graphviz/cgraph.h>
#include <graphviz/gvc.h>

#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <tuple>

#include "zklock/error.hpp"

namespace zklock::model {
namespace {

std::mutex& graphviz_mutex() {
  static std::mutex mu;
  return mu;
}

// Graphviz reports problems through agerr(); keep the last message for our
// Error instead of printing it to stderr. GUARDED_BY(graphviz_mutex()).
std::string& graphviz_message() {
  static std::string message;
  return message;
}

int keep_message(char* text) {
  graphviz_message() = text ? text : "";
  while (!graphviz_message().empty() && graphviz_message().back() == '\n') graphviz_message().pop_back();
  return 0;
}

}  // namespace

std::string dot_quote(std::string_view s) {
  std::string out = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  out += '"';
  return out;
}

DrawnGraph wait_for_dot(const std::vector<Wait>& waits, const std::vector<Cycle>& cycles, std::size_t max_edges) {
  using Key = std::tuple<std::string, std::string, std::string>;  // waiter, blocker, lock
  std::set<Key> on_cycle;
  for (const auto& c : cycles) {
    for (const auto& w : c.waits) on_cycle.insert({w.waiter, w.blocker, w.lock});
  }
  // One edge per (waiter, blocker, lock): hard if any of its waits is.
  std::map<Key, EdgeKind> edges;
  for (const auto& w : waits) {
    auto [it, inserted] = edges.try_emplace(Key{w.waiter, w.blocker, w.lock}, w.kind);
    if (!inserted && w.kind == EdgeKind::hard) it->second = EdgeKind::hard;
  }
  std::vector<std::pair<Key, EdgeKind>> drawn;
  for (int pass = 0; pass < 2; ++pass) {  // cycle edges first
    for (const auto& [key, kind] : edges) {
      if ((on_cycle.count(key) > 0) != (pass == 0)) continue;
      if (drawn.size() < max_edges) drawn.emplace_back(key, kind);
    }
  }
  DrawnGraph g;
  g.edges = drawn.size();
  g.edges_left_out = edges.size() - drawn.size();
  std::map<std::string, std::size_t> owners;  // owner id -> node number
  for (const auto& [key, _] : drawn) {
    owners.try_emplace(std::get<0>(key), 0);
    owners.try_emplace(std::get<1>(key), 0);
  }
  g.owners = owners.size();
  std::string& out = g.dot;
  out = "digraph waits {\n  rankdir=LR;\n  bgcolor=transparent;\n"
        "  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontname=\"Helvetica\", fontsize=11];\n"
        "  edge [fontname=\"Helvetica\", fontsize=9];\n";
  std::size_t n = 0;
  for (auto& [owner, number] : owners) {
    number = n++;
    out += "  " + dot_quote("owner:" + owner) + " [label=" + dot_quote(owner) + ", id=\"owner-" +
           std::to_string(number) + "\", class=\"owner\"];\n";
  }
  for (const auto& [key, kind] : drawn) {
    const auto& [waiter, blocker, lock] = key;
    const bool red = on_cycle.count(key) > 0;
    std::string cls = kind == EdgeKind::soft ? "wait soft" : "wait hard";
    std::string attrs = "label=" + dot_quote(lock) + ", style=" + (kind == EdgeKind::soft ? "dashed" : "solid");
    if (red) {
      cls += " cycle";
      attrs += ", color=red, fontcolor=red, penwidth=2";
    }
    out += "  " + dot_quote("owner:" + waiter) + " -> " + dot_quote("owner:" + blocker) + " [" + attrs +
           ", class=\"" + cls + "\"];\n";
  }
  out += "}\n";
  return g;
}

std::string render_svg(std::string_view dot) {
  std::lock_guard lock(graphviz_mutex());
  agseterrf(keep_message);
  agseterr(AGMAX);  // nothing printed; errors come back through keep_message
  graphviz_message().clear();
  static GVC_t* const gvc = gvContext();  // plugins loaded once; lives as long as the process
  if (!gvc) throw Error(Errc::io_error, "graphviz: no context (are its plugins installed?)");
  const std::string text(dot);
  std::unique_ptr<Agraph_t, int (*)(Agraph_t*)> g(agmemread(text.c_str()), agclose);
  if (!g) throw Error(Errc::invalid_argument, "graphviz: cannot parse the DOT: " + graphviz_message());
  if (gvLayout(gvc, g.get(), "dot") != 0) {
    throw Error(Errc::io_error, "graphviz: dot layout failed: " + graphviz_message());
  }
  char* data = nullptr;
  unsigned int length = 0;
  const int rc = gvRenderData(gvc, g.get(), "svg", &data, &length);
  std::string svg = rc == 0 && data ? std::string(data, length) : std::string();
  if (data) gvFreeRenderData(data);
  gvFreeLayout(gvc, g.get());
  if (rc != 0) throw Error(Errc::io_error, "graphviz: svg rendering failed: " + graphviz_message());
  return svg;
}

}  // namespace zklock::model
