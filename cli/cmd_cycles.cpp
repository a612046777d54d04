// zklock cycles [PATH]: the wait-for cycles right now, read-only, found by
// the detector's own graph code (lib/model).
#include <algorithm>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "cli/lock_tree.hpp"

namespace zklock::cli {
namespace {

struct CyclesOptions {
  std::string path;
  std::string min_wait = "0s";
};

void run_cycles(const GlobalOptions& g, const CyclesOptions& o) {
  const auto min_wait = parse_duration(o.min_wait);
  const std::string path = o.path.empty() ? resolve_path(g.root, "/") : resolve_path(o.path, g.root);
  auto client = connect(g);
  if (!o.path.empty() && !client->try_stat(path)) throw CliError(exit_code::no_such, "no such path: " + path);
  const auto tree = read_tree(*client, path);
  const auto analysis = analyze(tree.locks, min_wait, now_ms());
  const auto cycles = analysis.graph.cycles();
  // Abandoned waits (model::abandoned_wait) close no cycle: name them, so a
  // cycle-shaped tree that shows none is explained.
  std::vector<std::string> abandoned;
  for (const auto& [path, info] : analysis.nodes) {
    if (info.abandoned) abandoned.push_back(path);
  }
  std::sort(abandoned.begin(), abandoned.end());

  if (g.json) {
    nlohmann::json j{{"root", path}, {"cycles", nlohmann::json::array()}};
    for (const auto& c : cycles) j["cycles"].push_back(model::cycle_json(c));
    j["abandoned_waits"] = abandoned;
    add_unreadable_json(j, tree);
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return;
  }
  warn_if_partial(tree);
  for (const auto& p : abandoned) {
    std::cout << "abandoned wait (its owner gave up; counted in no cycle): " << p << "\n";
  }
  if (cycles.empty()) {
    std::cout << (tree.complete() ? "no cycles under " : "no cycles in the readable part of ") << path << "\n"
              << unreadable_text(tree);
    return;
  }
  for (std::size_t i = 0; i < cycles.size(); ++i) {
    std::cout << "cycle " << i + 1 << ": " << model::cycle_text(cycles[i]) << "\n";
    for (const auto& w : cycles[i].waits) {
      std::cout << "  " << w.waiter << " waits on " << w.lock << " (" << w.waiter_node << ") for " << w.blocker
                << (w.kind == model::EdgeKind::hard ? ", which holds it" : ", which waits ahead of it") << "\n";
    }
  }
  std::cout << unreadable_text(tree);
}

}  // namespace

void set_cycles_command(CLI::App* app, Context& ctx) {
  auto opts = std::make_shared<CyclesOptions>();
  auto* sub = app->add_subcommand("cycles", "Show the current wait-for cycles (deadlocks) under the root; read-only");
  sub->add_option("path", opts->path, "Where to look (absolute, or relative to --root); default: the root");
  sub->add_option("--min-wait", opts->min_wait, "Only count waits at least this old (the detector's --min-wait)")
      ->capture_default_str();
  sub->callback([&ctx, opts] { run_cycles(ctx.global, *opts); });
}

}  // namespace zklock::cli
