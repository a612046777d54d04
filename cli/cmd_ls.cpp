// zklock ls [PATH]: the lock paths under the root (or PATH) with their
// holders, waiters and oldest wait.
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "cli/lock_tree.hpp"

namespace zklock::cli {
namespace {

struct LsOptions {
  std::string path;
};

struct LockSummary {
  std::string path;
  std::vector<std::string> holders;  // owners, in grant order
  std::size_t waiters = 0;
  std::int64_t oldest_wait_ms = -1;  // -1: nobody waits
  std::size_t foreign = 0;
};

LockSummary summarize(const LockView& lock, std::int64_t now) {
  LockSummary s;
  s.path = lock.path;
  s.foreign = lock.foreign.size();
  const auto analysis = analyze({lock}, std::chrono::milliseconds::zero(), now);
  for (const auto& n : lock.nodes) {
    const auto it = analysis.nodes.find(n.path);
    if (it == analysis.nodes.end()) continue;
    if (it->second.holds) {
      s.holders.push_back(it->second.owner);
    } else {
      ++s.waiters;
      s.oldest_wait_ms = std::max(s.oldest_wait_ms, std::max<std::int64_t>(0, now - n.stat.ctime));
    }
  }
  return s;
}

void run_ls(const GlobalOptions& g, const LsOptions& o) {
  const bool explicit_path = !o.path.empty();
  const std::string path = explicit_path ? resolve_path(o.path, g.root) : resolve_path(g.root, "/");
  auto client = connect(g);
  if (explicit_path && !client->try_stat(path)) throw CliError(exit_code::no_such, "no such path: " + path);
  const auto tree = read_tree(*client, path);
  const auto now = now_ms();

  std::vector<LockSummary> rows;
  for (const auto& l : tree.locks) rows.push_back(summarize(l, now));

  if (g.json) {
    nlohmann::json j{{"root", path}, {"locks", nlohmann::json::array()}};
    for (const auto& r : rows) {
      j["locks"].push_back({{"path", r.path},
                            {"holders", r.holders.size()},
                            {"holder_owners", r.holders},
                            {"waiters", r.waiters},
                            {"oldest_wait_ms", r.oldest_wait_ms < 0 ? nlohmann::json(nullptr)
                                                                    : nlohmann::json(r.oldest_wait_ms)},
                            {"foreign", r.foreign}});
    }
    add_unreadable_json(j, tree);
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return;
  }
  warn_if_partial(tree);
  if (rows.empty()) {
    std::cout << (tree.complete() ? "no locks under " : "no readable locks under ") << path << "\n"
              << unreadable_text(tree);
    return;
  }
  Table t({"LOCK", "HOLDERS", "WAITERS", "OLDEST WAIT", "HELD BY"});
  for (const auto& r : rows) {
    std::string held_by = r.holders.empty() ? "-" : r.holders.front();
    if (r.holders.size() > 1) held_by += " (+" + std::to_string(r.holders.size() - 1) + ")";
    t.add_row({r.path, std::to_string(r.holders.size()), std::to_string(r.waiters),
               r.oldest_wait_ms < 0 ? "-" : humanize_age(std::chrono::milliseconds(r.oldest_wait_ms)), held_by});
  }
  std::cout << t.render() << unreadable_text(tree);
}

}  // namespace

void set_ls_command(CLI::App* app, Context& ctx) {
  auto opts = std::make_shared<LsOptions>();
  auto* sub = app->add_subcommand("ls", "List lock paths under the root (or PATH) with holders, waiters and oldest wait");
  sub->add_option("path", opts->path, "Where to look (absolute, or relative to --root); default: the root");
  sub->callback([&ctx, opts] { run_ls(ctx.global, *opts); });
}

}  // namespace zklock::cli
