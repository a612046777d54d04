#include "detector/status.hpp"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>
#include <tuple>

#include <nlohmann/json.hpp>

#include "model/wait_for_graph.hpp"
#include "model/wait_for_graph_draw.hpp"
#include "zklock/error.hpp"

namespace zklock::detector {
namespace {

nlohmann::json node_json(const StatusNode& n) {
  return {{"owner", n.owner}, {"node", n.node}, {"mode", mode_name(n.mode)}, {"age_ms", n.age_ms}};
}

}  // namespace

StatusData build_status(const model::WaitAnalysis& analysis, std::size_t lone_queues, std::int64_t now_ms) {
  StatusData d;
  d.time_ms = now_ms;
  d.locks_total = analysis.locks;
  d.holders = analysis.holders;
  d.waiters = analysis.waiters;
  d.held_alone = lone_queues;

  // analysis.nodes holds every node of every contended queue: group by lock.
  std::map<std::string, StatusLock> by_lock;
  for (const auto& [path, info] : analysis.nodes) {
    auto& l = by_lock[info.lock];
    l.path = info.lock;
    ++l.depth;
    StatusNode n{info.owner, path, info.mode, info.ctime_ms ? std::max<std::int64_t>(0, now_ms - info.ctime_ms) : 0};
    if (info.holds) {
      l.holders.push_back(std::move(n));
    } else {
      ++l.waiters_total;
      l.oldest_wait_ms = std::max(l.oldest_wait_ms, n.age_ms);
      l.waiters.push_back(std::move(n));
    }
  }
  std::vector<StatusLock> locks;
  for (auto& [_, l] : by_lock) {
    if (l.waiters_total == 0) continue;
    auto older = [](const StatusNode& a, const StatusNode& b) { return std::tie(b.age_ms, a.node) < std::tie(a.age_ms, b.node); };
    std::sort(l.holders.begin(), l.holders.end(), older);
    std::sort(l.waiters.begin(), l.waiters.end(), older);
    if (l.waiters.size() > kMaxWaitersListed) l.waiters.resize(kMaxWaitersListed);
    locks.push_back(std::move(l));
  }
  std::sort(locks.begin(), locks.end(), [](const StatusLock& a, const StatusLock& b) {
    return a.waiters_total != b.waiters_total ? a.waiters_total > b.waiters_total : a.path < b.path;
  });
  if (locks.size() > kMaxLocks) {
    d.locks_left_out = locks.size() - kMaxLocks;
    locks.resize(kMaxLocks);
  }
  d.locks = std::move(locks);

  // The waits worth drawing: every cycle's, then those on the listed locks.
  d.cycles = analysis.graph.cycles();
  std::set<std::string> listed;
  for (const auto& l : d.locks) listed.insert(l.path);
  std::set<std::tuple<std::string, std::string, std::string, std::string, std::string>> seen;
  auto add = [&](const model::Wait& w) {
    if (!seen.insert({w.waiter, w.blocker, w.lock, w.waiter_node, w.blocker_node}).second) return;
    if (d.waits.size() < kMaxWaits) {
      d.waits.push_back(w);
    } else {
      ++d.waits_left_out;
    }
  };
  for (const auto& c : d.cycles) {
    for (const auto& w : c.waits) add(w);
  }
  for (const auto& w : analysis.graph.waits()) {
    if (listed.count(w.lock)) add(w);
  }
  return d;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char c : s) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string status_json(const StatusData& d) {
  nlohmann::json j{{"root", d.root},
                   {"detector", {{"id", d.detector_id},
                                 {"leader", d.leader},
                                 {"scan", d.scan},
                                 {"time_ms", d.time_ms},
                                 {"interval_ms", d.interval_ms},
                                 {"min_wait_ms", d.min_wait_ms}}},
                   {"counts", {{"locks", d.locks_total},
                               {"holders", d.holders},
                               {"waiters", d.waiters},
                               {"held_alone", d.held_alone},
                               {"cycles", d.cycles.size()}}},
                   {"locks", nlohmann::json::array()},
                   {"locks_left_out", d.locks_left_out},
                   {"owners", nlohmann::json::array()},
                   {"waits", nlohmann::json::array()},
                   {"waits_left_out", d.waits_left_out},
                   {"cycles", nlohmann::json::array()},
                   {"revocations", nlohmann::json::array()},
                   {"revocations_read", d.revocations_read}};
  for (const auto& l : d.locks) {
    nlohmann::json lj{{"path", l.path},
                      {"depth", l.depth},
                      {"holders", nlohmann::json::array()},
                      {"waiters", nlohmann::json::array()},
                      {"waiters_total", l.waiters_total},
                      {"oldest_wait_ms", l.oldest_wait_ms}};
    for (const auto& n : l.holders) lj["holders"].push_back(node_json(n));
    for (const auto& n : l.waiters) lj["waiters"].push_back(node_json(n));
    j["locks"].push_back(std::move(lj));
  }
  std::set<std::string> owners;
  for (const auto& w : d.waits) {
    owners.insert(w.waiter);
    owners.insert(w.blocker);
    j["waits"].push_back(model::wait_json(w));
  }
  j["owners"] = owners;
  for (const auto& c : d.cycles) j["cycles"].push_back(model::cycle_json(c));
  for (const auto& rv : d.revocations) j["revocations"].push_back(model::revocation_json(rv.record, rv.r));
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

void StatusBoard::update(StatusData data) {
  std::lock_guard lock(mu_);
  data_ = std::make_shared<const StatusData>(std::move(data));
  ++version_;
}

std::int64_t StatusBoard::look() {
  last_look_ms_ = std::chrono::duration_cast<std::chrono::milliseconds>(
                      std::chrono::system_clock::now().time_since_epoch()).count();
  return last_look_ms_;
}

const StatusData& StatusBoard::data() const {
  static const StatusData kEmpty;
  return data_ ? *data_ : kEmpty;
}

std::string StatusBoard::json() {
  std::lock_guard lock(mu_);
  look();
  if (json_version_ != version_) {
    json_ = status_json(data());
    json_version_ = version_;
  }
  return json_;
}

std::string StatusBoard::html() {
  std::lock_guard lock(mu_);
  look();
  if (html_version_ == version_) return html_;
  const auto& d = data();
  // Scans repeat the same graph far more often than it changes: lay it out
  // again only when its DOT differs.
  auto dot = d.waits.empty() ? std::string() : model::wait_for_dot(d.waits, d.cycles, kMaxWaits).dot;
  if (dot != dot_) {
    svg_.clear();
    svg_error_.clear();
    if (!dot.empty()) {
      try {
        svg_ = model::render_svg(dot);
        // Graphviz writes an XML prolog and a DOCTYPE: inline SVG starts at <svg.
        if (const auto at = svg_.find("<svg"); at != std::string::npos) svg_.erase(0, at);
      } catch (const Error& e) {
        svg_error_ = e.what();
      }
    }
    dot_ = std::move(dot);
  }
  html_ = status_html(d, svg_, svg_error_);
  html_version_ = version_;
  return html_;
}

bool StatusBoard::looked_at_since(std::int64_t now_ms, std::int64_t window_ms) const {
  std::lock_guard lock(mu_);
  return last_look_ms_ != 0 && now_ms - last_look_ms_ <= window_ms;
}

}  // namespace zklock::detector
