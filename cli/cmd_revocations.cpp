// zklock revocations: the recent revocation records under
// /zklock/revocations, newest first.
#include <algorithm>
#include <iostream>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "model/wait_for_graph.hpp"
#include "zklock/path.hpp"
#include "zklock/protocol/revocation.hpp"

namespace zklock::cli {
namespace {

struct RevocationsOptions {
  std::size_t limit = 20;
};

void run_revocations(const GlobalOptions& g, const RevocationsOptions& o) {
  auto client = connect(g);
  const std::string dir(protocol::kRevocationsPath);
  const auto names = client->try_children(dir).value_or(std::vector<std::string>{});  // none yet: empty
  struct Entry {
    std::string path;
    protocol::RevocationRecord record;
    bool valid;
  };
  std::vector<Entry> entries;
  for (const auto& n : names) {
    const std::string p = join_path(dir, n);
    Stat stat;
    const auto data = client->try_get(p, &stat);
    if (!data) continue;  // pruned meanwhile
    auto rec = protocol::decode_revocation_record(*data);
    Entry e{p, rec.value_or(protocol::RevocationRecord{}), rec.has_value()};
    if (!e.valid) e.record.time_ms = stat.ctime;
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    if (a.record.time_ms != b.record.time_ms) return a.record.time_ms > b.record.time_ms;
    return a.path < b.path;
  });
  if (entries.size() > o.limit) entries.resize(o.limit);
  const auto now = now_ms();

  if (g.json) {
    nlohmann::json j{{"revocations", nlohmann::json::array()}};
    for (const auto& e : entries) {
      auto rj = model::revocation_json(e.path, e.record);
      rj["valid"] = e.valid;  // the CLI reads every record; the detector shows only valid ones
      j["revocations"].push_back(std::move(rj));
    }
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
    return;
  }
  if (entries.empty()) {
    std::cout << "no revocations\n";
    return;
  }
  Table t({"WHEN", "VICTIM", "OWNER", "POLICY", "MODE", "BY", "CYCLE / REASON"});
  for (const auto& e : entries) {
    const auto& r = e.record;
    if (!e.valid) {
      t.add_row({humanize_age(std::chrono::milliseconds(now - r.time_ms)) + " ago", e.path, "-", "-", "-", "-",
                 "(malformed record)"});
      continue;
    }
    std::string why = protocol::cycle_text(r);
    if (!r.reason.empty()) why = why.empty() ? r.reason : why + "; " + r.reason;
    t.add_row({humanize_age(std::chrono::milliseconds(now - r.time_ms)) + " ago", r.victim_node, r.victim_owner,
               r.policy, r.mode, r.detector, why.empty() ? "-" : why});
  }
  std::cout << t.render();
}

}  // namespace

void set_revocations_command(CLI::App* app, Context& ctx) {
  auto opts = std::make_shared<RevocationsOptions>();
  auto* sub = app->add_subcommand("revocations", "List recent revocation records (victim, cycle, policy, when, by whom)");
  sub->add_option("--limit", opts->limit, "Show at most this many, newest first")->capture_default_str();
  sub->callback([&ctx, opts] { run_revocations(ctx.global, *opts); });
}

}  // namespace zklock::cli
