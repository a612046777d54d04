// zklock revoke NODE --reason TEXT: an operator's revocation, through the
// same atomic record-and-delete as the detector (zklock/protocol/revoke.hpp).
// The node's owner is told: a waiter's acquire fails as a deadlock victim,
// a holder's lease is lost (revoked), both with the recorded reason.
#include <algorithm>
#include <cstdlib>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "cli/lock_tree.hpp"
#include "zklock/protocol/host.hpp"
#include "zklock/protocol/revoke.hpp"

namespace zklock::cli {
namespace {

struct RevokeOptions {
  std::string node;
  std::string reason;
};

// "zklock-cli:<user>@<host>": who revoked, as recorded.
std::string operator_id() {
  const char* user = std::getenv("USER");
  return std::string("zklock-cli:") + (user != nullptr && *user != '\0' ? user : "unknown") + "@" + protocol::host_name();
}

void run_revoke(const GlobalOptions& g, const RevokeOptions& o) {
  if (o.reason.empty()) throw CliError(exit_code::usage, "--reason must not be empty");
  const std::string path = resolve_path(o.node, g.root);
  const auto [lock, name] = split_path(path);
  const auto parsed = protocol::parse_lock_node_name(name);
  if (!parsed) throw CliError(exit_code::usage, path + " is not a zklock lock node (see 'zklock queue LOCK')");
  auto client = connect(g);

  // The owner exactly as `zklock queue` shows it: the queue model's owner
  // resolution over the node's lock (model::analyze_queues()).
  const LockView view = read_lock_or_exit(*client, lock, "no such node: " + path);
  const auto node = std::find_if(view.nodes.begin(), view.nodes.end(), [&](const NodeView& n) { return n.path == path; });
  if (node == view.nodes.end()) throw CliError(exit_code::no_such, "no such node: " + path);
  const auto analysis = analyze({view}, std::chrono::milliseconds::zero(), now_ms());

  protocol::RevocationRequest req;
  req.victims.push_back({path, analysis.nodes.at(path).owner, node->stat.czxid});
  req.record.policy = "operator";
  req.record.mode = "wait";
  req.record.detector = operator_id();
  req.record.time_ms = now_ms();
  req.record.reason = o.reason;
  const auto timeout = client->options().session_timeout + std::chrono::seconds(5);
  const protocol::RevokeResult r = revoke(*client, req, timeout);

  if (g.json) {
    nlohmann::json j{{"outcome", protocol::revoke_outcome_name(r.outcome)},
                     {"node", path},
                     {"owner", req.victims.front().owner},
                     {"records", r.records},
                     {"detail", r.detail}};
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  }
  switch (r.outcome) {
    case protocol::RevokeOutcome::revoked:
      if (!g.json) {
        std::cout << "revoked " << path << " (owner " << req.victims.front().owner << "); record "
                  << (r.records.empty() ? protocol::revocation_record_path(path) : r.records.front()) << "\n";
      }
      return;
    case protocol::RevokeOutcome::aborted:
      throw CliError(exit_code::no_such, "no such node: " + path + " (gone before it could be revoked)");
    case protocol::RevokeOutcome::deposed:
    case protocol::RevokeOutcome::failed:
      break;
  }
  const int code = r.status.ok() ? exit_code::failure : exit_code_for(r.status.code());
  throw CliError(code, "revoking " + path + " failed: " + r.detail);
}

}  // namespace

void set_revoke_command(CLI::App* app, Context& ctx) {
  auto opts = std::make_shared<RevokeOptions>();
  auto* sub = app->add_subcommand("revoke", "Revoke a lock node (delete it atomically with a revocation record)");
  sub->add_option("node", opts->node, "The node (absolute, or relative to --root: LOCK/NODE-NAME)")->required();
  sub->add_option("--reason", opts->reason, "Why; recorded and shown to the node's owner")->required();
  sub->callback([&ctx, opts] { run_revoke(ctx.global, *opts); });
}

}  // namespace zklock::cli
