// The status page (GET /): one self-contained HTML document — inline style,
// the graph as inline SVG, a few lines of inline script — that fetches
// nothing from elsewhere. The script polls api/state and, when the scan
// number changed, fetches the page again and swaps its body: all rendering
// (and all escaping) stays here, in one place. Without script the page is
// complete as served; it is just not refreshed.
#include <algorithm>
#include <cstdio>
#include <ctime>

#include "detector/status.hpp"

namespace zklock::detector {
namespace {

// "850 ms", "12.3 s", "4 min 05 s", "2 h 07 min".
std::string age(std::int64_t ms) {
  char buf[48];
  if (ms < 1000) {
    std::snprintf(buf, sizeof buf, "%lld ms", static_cast<long long>(ms));
  } else if (ms < 60'000) {
    std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(ms) / 1000.0);
  } else if (ms < 3'600'000) {
    std::snprintf(buf, sizeof buf, "%lld min %02lld s", static_cast<long long>(ms / 60'000),
                  static_cast<long long>(ms / 1000 % 60));
  } else {
    std::snprintf(buf, sizeof buf, "%lld h %02lld min", static_cast<long long>(ms / 3'600'000),
                  static_cast<long long>(ms / 60'000 % 60));
  }
  return buf;
}

std::string utc(std::int64_t ms) {
  const std::time_t t = static_cast<std::time_t>(ms / 1000);
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d %H:%M:%S UTC", &tm);
  return buf;
}

std::string plural(std::size_t n, const char* one, const char* many) {
  return std::to_string(n) + " " + (n == 1 ? one : many);
}

constexpr const char* kStyle = R"(
body{font:14px/1.4 system-ui,sans-serif;margin:1.5em;color:#222;background:#fafafa}
h1{font-size:1.4em;margin:0 0 .2em}h2{font-size:1.1em;margin:1.4em 0 .4em}
table{border-collapse:collapse;background:#fff}th,td{border:1px solid #ddd;padding:.25em .6em;text-align:left;vertical-align:top}
th{background:#eee}td.n{text-align:right}code{font:12px ui-monospace,monospace}
.note{color:#666}.cycle{color:#c00;font-weight:600}#graph{background:#fff;border:1px solid #ddd;overflow:auto;max-height:70vh;padding:.5em}
#graph svg{max-width:100%;height:auto}
)";

// Polls api/state every `interval` ms; on a new scan, swaps in the new body.
std::string script(std::int64_t interval_ms) {
  const auto every = std::clamp<std::int64_t>(interval_ms, 500, 10'000);
  return "<script>\n"
         "setInterval(async () => {\n"
         "  try {\n"
         "    const s = await (await fetch('api/state', {cache: 'no-store'})).json();\n"
         "    if (String(s.detector.scan) === document.body.dataset.scan) return;\n"
         "    const page = await (await fetch('./', {cache: 'no-store'})).text();\n"
         "    document.body.replaceWith(new DOMParser().parseFromString(page, 'text/html').body);\n"
         "  } catch (e) { document.body.dataset.stale = 'true'; }\n"
         "}, " + std::to_string(every) + ");\n"
         "</script>\n";
}

std::string owner_cell(const std::vector<StatusNode>& holders) {
  if (holders.empty()) return "<td>-</td><td>-</td>";
  std::string owners, ages;
  for (std::size_t i = 0; i < holders.size(); ++i) {
    if (i) owners += "<br>", ages += "<br>";
    owners += html_escape(holders[i].owner) + (holders[i].mode == Mode::shared ? " <span class=note>(shared)</span>" : "");
    ages += age(holders[i].age_ms);
  }
  return "<td>" + owners + "</td><td class=n>" + ages + "</td>";
}

void locks_section(std::string& out, const StatusData& d) {
  out += "<section id=locks><h2>Locks with waiters</h2>\n";
  if (d.locks.empty()) {
    out += "<p class=note>No lock has a waiter.</p>\n";
  } else {
    out += "<table><tr><th>Lock</th><th>Queue</th><th>Holder</th><th>Held for</th><th>Waiters</th>"
           "<th>Oldest wait</th></tr>\n";
    for (const auto& l : d.locks) {
      std::string waiters;
      for (const auto& w : l.waiters) waiters += (waiters.empty() ? "" : "<br>") + html_escape(w.owner);
      if (l.waiters_total > l.waiters.size()) waiters += "<br><span class=note>and " +
                                                         std::to_string(l.waiters_total - l.waiters.size()) + " more</span>";
      out += "<tr><td><code>" + html_escape(l.path) + "</code></td><td class=n>" + std::to_string(l.depth) + "</td>" +
             owner_cell(l.holders) + "<td>" + waiters + "</td><td class=n>" + age(l.oldest_wait_ms) + "</td></tr>\n";
    }
    out += "</table>\n";
  }
  if (d.locks_left_out) {
    out += "<p class=note id=locks-left-out>" + plural(d.locks_left_out, "more lock", "more locks") +
           " with waiters not shown (the page lists the " + std::to_string(kMaxLocks) + " with most waiters).</p>\n";
  }
  out += "<p class=note>" + plural(d.held_alone, "lock is", "locks are") + " held with no waiter (not listed).</p>\n";
  out += "</section>\n";
}

void graph_section(std::string& out, const StatusData& d, const std::string& svg, const std::string& svg_error) {
  out += "<section><h2>Wait-for graph</h2>\n<p class=note>Owners that wait or are waited for; an arrow "
         "<i>A &rarr; B</i> labelled with a lock: A waits for B on that lock. Solid: B holds it; dashed: B waits "
         "ahead of A; red: a cycle.</p>\n";
  if (d.waits.empty()) {
    out += "<p class=note>No waits.</p>\n";
  } else if (!svg_error.empty()) {
    out += "<p class=cycle>The graph could not be drawn: " + html_escape(svg_error) + "</p>\n";
  } else {
    out += "<div id=graph>" + svg + "</div>\n";
  }
  if (d.waits_left_out) {
    out += "<p class=note>" + plural(d.waits_left_out, "more wait", "more waits") + " not drawn.</p>\n";
  }
  out += "</section>\n<section id=cycles><h2>Cycles</h2>\n";
  if (d.cycles.empty()) out += "<p class=note>No cycle.</p>\n";
  for (const auto& c : d.cycles) out += "<p class=cycle><code>" + html_escape(model::cycle_text(c)) + "</code></p>\n";
  out += "</section>\n";
}

void revocations_section(std::string& out, const StatusData& d) {
  out += "<section id=revocations><h2>Last revocations</h2>\n";
  if (!d.revocations_read) {
    out += "<p class=note>Reading the revocation records&hellip;</p>\n";
  } else if (d.revocations.empty()) {
    out += "<p class=note>No revocation records.</p>\n";
  } else {
    out += "<table><tr><th>When</th><th>Victim</th><th>Cycle it broke</th><th>Policy</th><th>Mode</th>"
           "<th>By</th></tr>\n";
    for (const auto& rv : d.revocations) {
      const auto& r = rv.r;
      std::string why = protocol::cycle_text(r);
      if (!r.reason.empty()) why = why.empty() ? r.reason : why + "; " + r.reason;
      out += "<tr><td title=\"" + utc(r.time_ms) + "\">" + age(std::max<std::int64_t>(0, d.time_ms - r.time_ms)) +
             " ago</td><td>" + html_escape(r.victim_owner) + "<br><code>" + html_escape(r.victim_node) +
             "</code></td><td><code>" + html_escape(why.empty() ? "-" : why) + "</code></td><td>" +
             html_escape(r.policy) + "</td><td>" + html_escape(r.mode) + "</td><td>" + html_escape(r.detector) +
             "</td></tr>\n";
    }
    out += "</table>\n";
  }
  out += "</section>\n";
}

}  // namespace

std::string status_html(const StatusData& d, const std::string& svg, const std::string& svg_error) {
  std::string out = "<!DOCTYPE html>\n<html lang=en><head><meta charset=utf-8>\n"
                    "<meta name=viewport content=\"width=device-width\">\n<title>zklock-detector " +
                    html_escape(d.root) + "</title>\n<style>" + kStyle + "</style>\n" + script(d.interval_ms) +
                    "</head>\n";
  out += "<body data-scan=\"" + std::to_string(d.scan) + "\">\n<h1>zklock-detector <code>" + html_escape(d.root) +
         "</code></h1>\n<p id=summary>";
  if (d.scan == 0) {
    out += "No scan yet.";
  } else {
    out += html_escape(d.detector_id) + " &middot; " + (d.leader ? "leader" : "standby") + " &middot; scan " +
           std::to_string(d.scan) + " at " + utc(d.time_ms) + " &middot; " + plural(d.locks_total, "lock", "locks") +
           ", " + std::to_string(d.holders) + " held, " + std::to_string(d.waiters) + " waiting, " +
           plural(d.cycles.size(), "cycle", "cycles") + " &middot; min-wait " + age(d.min_wait_ms);
  }
  out += "</p>\n";
  graph_section(out, d, svg, svg_error);
  locks_section(out, d);
  revocations_section(out, d);
  out += "<p class=note>Read-only. The same data as JSON: <a href=\"api/state\">api/state</a>.</p>\n</body></html>\n";
  return out;
}

}  // namespace zklock::detector
