// Drawing the wait-for graph: DOT for Graphviz, and SVG from any DOT.
//
// wait_for_dot() is pure: owners are the nodes (only owners on a path that
// waits: the graph knows owners through waits alone), one edge per
// (waiter, blocker, lock) labelled with the lock, solid when the blocker
// holds it (hard), dashed when the blocker itself still waits ahead (soft),
// red when it lies on a reported cycle. Edges on a cycle come first, so a
// cap on the edges drawn never hides a cycle.
//
// render_svg() lays any DOT out with Graphviz's `dot` engine (libgvc +
// libcgraph, Debian's libgraphviz-dev) and returns SVG. Graphviz escapes the
// labels it writes as XML text, so the SVG may be inlined in HTML.
//
// Thread-safety: wait_for_dot() is a pure function. render_svg() may be
// called from any thread: Graphviz keeps global state (its DOT parser is not
// reentrant), so every call runs under one process-wide mutex.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "model/wait_for_graph.hpp"

namespace zklock::model {

struct DrawnGraph {
  std::string dot;
  std::size_t owners = 0;          // owners drawn
  std::size_t edges = 0;           // edges drawn (one per waiter, blocker, lock)
  std::size_t edges_left_out = 0;  // beyond max_edges
};

// Every node carries id="owner-<n>" and every edge class="wait" plus
// " hard"/" soft" and " cycle" when on a cycle (Graphviz copies `class`
// into the SVG), so tools and tests can find them.
DrawnGraph wait_for_dot(const std::vector<Wait>& waits, const std::vector<Cycle>& cycles,
                        std::size_t max_edges = 400);

// A Graphviz double-quoted ID for `s` (quotes and backslashes escaped,
// newlines as \n).
std::string dot_quote(std::string_view s);

// SVG of `dot` laid out by Graphviz's dot engine. Throws Error(invalid_argument)
// when Graphviz cannot parse the DOT, Error(io_error) when it cannot lay it
// out or render (e.g. its plugins are missing).
std::string render_svg(std::string_view dot);

}  // namespace zklock::model
