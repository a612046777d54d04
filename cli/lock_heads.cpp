#include "cli/lock_heads.hpp"

#include <algorithm>
#include <unordered_map>

#include "cli/common.hpp"

namespace zklock::cli {

HeadReport find_long_heads(Client& client, const TreeView& tree, std::int64_t now_ms,
                           std::chrono::milliseconds threshold) {
  std::unordered_map<std::string, const NodeView*> by_path;
  for (const auto& l : tree.locks) {
    for (const auto& n : l.nodes) by_path.emplace(n.path, &n);
  }
  const auto analysis = analyze(tree.locks, std::chrono::milliseconds::zero(), now_ms);
  // analyze() never lets "now" fall behind the newest ctime it saw (a clock
  // behind the server's must not hide a head); use the same instant here.
  for (const auto& l : tree.locks) {
    for (const auto& n : l.nodes) now_ms = std::max(now_ms, n.stat.ctime);
  }

  HeadReport out;
  for (const auto& h : analysis.heads) {
    ++out.with_waiters;
    if (!h.known()) continue;
    auto since = h.since_ms();
    if (now_ms - since < threshold.count()) continue;
    bool since_hand_off = false;
    if (h.mode == Mode::exclusive) {
      // The marker (docs/protocol.md, section 5): see lock_heads.hpp.
      if (const auto lock = client.try_stat(h.lock); lock && lock->mzxid > h.czxid && lock->mtime > since) {
        since = lock->mtime;
        since_hand_off = true;
        if (now_ms - since < threshold.count()) continue;
      }
    }
    const auto it = by_path.find(h.node);
    if (it == by_path.end()) continue;  // cannot happen: analyze() saw it in the tree
    const auto& node = *it->second;
    HeadFinding f;
    f.lock = h.lock;
    f.node = h.node;
    f.name = node.name;
    f.owner = h.owner;
    f.session = node.stat.ephemeral_owner != 0 ? session_hex(node.stat.ephemeral_owner) : "none";
    f.kept_waiting_ms = now_ms - since;
    f.since_hand_off = since_hand_off;
    f.holders = h.holders;
    f.waiters = h.waiters;
    out.findings.push_back(std::move(f));
  }
  std::sort(out.findings.begin(), out.findings.end(),
            [](const HeadFinding& a, const HeadFinding& b) { return a.lock < b.lock; });
  return out;
}

std::string finding_text(const HeadFinding& f) {
  std::string s(kHeadNotTakingTheLock);
  s += ": " + f.name + " of " + f.owner;
  s += f.session == "none" ? " (session none: a persistent node, no expiry removes it)" : " (session " + f.session + ")";
  s += " has had " + std::to_string(f.waiters) + " waiting behind it for " +
       humanize_age(std::chrono::milliseconds(f.kept_waiting_ms));
  s += f.since_hand_off ? " (since the last hand-off)" : "";
  s += ": held or stuck, check the owner";
  return s;
}

}  // namespace zklock::cli
