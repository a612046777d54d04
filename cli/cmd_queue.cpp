// zklock queue LOCK: one lock's FIFO queue, in grant order.
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "cli/lock_tree.hpp"
#include "zklock/token.hpp"

namespace zklock::cli {
namespace {

struct QueueOptions {
  std::string lock;
};

void run_queue(const GlobalOptions& g, const QueueOptions& o) {
  const std::string path = resolve_lock_path(o.lock, g.root);
  auto client = connect(g);
  const LockView lock = read_lock_or_exit(*client, path, "no such lock: " + path);
  const auto ensemble = read_ensemble_id(*client);
  const auto now = now_ms();
  const auto analysis = analyze({lock}, std::chrono::milliseconds::zero(), now);

  struct Row {
    std::size_t position;
    const NodeView* node;
    const model::NodeInfo* info;
    std::string token;
  };
  std::vector<Row> rows;
  std::size_t holders = 0;
  // "abandoned": a waiting node past its stated timeout and the skew
  // allowance (model::abandoned_wait): its owner gave up while disconnected.
  const auto state = [](const model::NodeInfo& i) { return i.holds ? "holds" : i.abandoned ? "abandoned" : "waits"; };
  for (std::size_t i = 0; i < lock.nodes.size(); ++i) {
    const auto& n = lock.nodes[i];
    const auto* info = &analysis.nodes.at(n.path);
    holders += info->holds ? 1 : 0;
    // A grant's token is its node's czxid (docs/protocol.md), re-takes too.
    // Whether a holder's lease is in use or its node lies retained idle is
    // known only to its process: ZooKeeper sees the same node either way.
    rows.push_back({i + 1, &n, info, ensemble ? FencingToken(*ensemble, n.stat.czxid).str() : std::string()});
  }

  if (g.json) {
    nlohmann::json j{{"lock", path},
                     {"ensemble_id", ensemble ? nlohmann::json(*ensemble) : nlohmann::json(nullptr)},
                     {"holders", holders},
                     {"waiters", rows.size() - holders},
                     {"nodes", nlohmann::json::array()},
                     {"foreign", nlohmann::json::array()}};
    for (const auto& r : rows) {
      nlohmann::json n{{"position", r.position},
                       {"state", state(*r.info)},
                       {"mode", mode_name(r.info->mode)},
                       {"owner", r.info->owner},
                       {"owner_key", r.node->parsed->owner_key},
                       {"node", r.node->name},
                       {"path", r.node->path},
                       {"sequence", r.node->parsed->sequence},
                       {"token", r.token.empty() ? nlohmann::json(nullptr) : nlohmann::json(r.token)},
                       {"czxid", r.node->stat.czxid},
                       {"session", session_hex(r.node->stat.ephemeral_owner)},
                       {"ctime_ms", r.node->stat.ctime},
                       {"age_ms", std::max<std::int64_t>(0, now - r.node->stat.ctime)},
                       {"priority", r.node->data ? r.node->data->priority : 0},
                       {"host", r.node->data ? nlohmann::json(r.node->data->host) : nlohmann::json(nullptr)},
                       {"pid", r.node->data ? nlohmann::json(r.node->data->pid) : nlohmann::json(nullptr)},
                       {"description", r.node->data && !r.node->data->description.empty()
                                           ? nlohmann::json(r.node->data->description)
                                           : nlohmann::json(nullptr)}};
      j["nodes"].push_back(std::move(n));
    }
    for (const auto& f : lock.foreign) j["foreign"].push_back({{"node", f.name}, {"path", f.path}});
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return;
  }

  std::cout << path << ": " << holders << (holders == 1 ? " holder, " : " holders, ") << rows.size() - holders
            << " waiting";
  if (!lock.foreign.empty()) std::cout << ", " << lock.foreign.size() << " foreign";
  std::cout << "\n";
  if (rows.empty() && lock.foreign.empty()) return;
  Table t({"POS", "STATE", "MODE", "OWNER", "NODE", "SEQ", "TOKEN", "SESSION", "AGE"});
  for (const auto& r : rows) {
    t.add_row({std::to_string(r.position) + (r.info->holds ? "*" : ""),
               state(*r.info),
               std::string(mode_name(r.info->mode)), r.info->owner, r.node->name,
               std::to_string(r.node->parsed->sequence), r.token.empty() ? "-" : r.token,
               session_hex(r.node->stat.ephemeral_owner),
               humanize_age(std::chrono::milliseconds(now - r.node->stat.ctime))});
  }
  for (const auto& f : lock.foreign) t.add_row({"-", "foreign", "-", "-", f.name, "-", "-", "-", "-"});
  std::cout << t.render();
}

}  // namespace

void set_queue_command(CLI::App* app, Context& ctx) {
  auto opts = std::make_shared<QueueOptions>();
  auto* sub = app->add_subcommand("queue", "Show a lock's FIFO queue: holders (marked *) and waiters in grant order");
  sub->add_option("lock", opts->lock, "The lock (absolute, or relative to --root)")->required();
  sub->callback([&ctx, opts] { run_queue(ctx.global, *opts); });
}

}  // namespace zklock::cli
