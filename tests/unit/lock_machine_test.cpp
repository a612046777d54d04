// Transcript tests of the lock machine (lib/src/lock_machine.hpp): one file per
// recovery story in tests/unit/testdata/lock_machine/, in the manner of etcd
// raft's testdata/*.txt. Each file is replayed into a real LockMachine; the
// commands it returns are printed one per line and compared with the lines in
// the file. ZKLOCK_TRANSCRIPT_REWRITE=1 writes the actual output back into the
// files instead (for a change of behaviour made on purpose: then read every
// changed line).
//
// The format (testdata/lock_machine/README.md says the same for readers):
//
//   # a comment                   kept as is
//   config mode=exclusive ...     a MachineConfig; `> start` then builds a fresh
//                                 machine from it (a file may hold several)
//   > start                       an input: start(), an event, or `state`
//     list tag=2                  the output: one command per line, indented
//
// Config keys (defaults in brackets): mode=exclusive|shared [exclusive],
// policy=tolerant|strict [tolerant], retain=yes|no [no],
// history=unknown|free|contended [contended], epoch [1], lock [/locks/demo]. The GUID is fixed (kGuid below).
//
// Inputs: `> start`, `> state` (prints the machine's phase and flags), and
// `> <event kind> key=value ...` with the keys tag, epoch (default: the
// config's), rc, name, czxid, bound=held|lapsed|none (the shell's clock
// against the validity bound, on every event; none: the settings prove no
// bound; held unless said), confirmed=recent|stale and cancelled=yes|no
// (retake; recent and no unless said), owner=idle|busy
// (release: may the node be kept idle; idle unless said), children=a,b
// stats=ok:5,no_node data, errc, detail. Values with spaces go in double or single quotes. An
// input with no command prints `(nothing)`.
//
// Node names are short: <mode>_<who>_<sequence>, say w_us0_5. `usN` is the
// machine's own N-th create (its GUID: the config's first 24 digits, then N
// in 8 hex digits); any other `who` is another client's attempt, with an
// owner key and GUID derived from the word. The runner expands them to real
// child names (w_<owner key>_<guid>_0000000005) for the machine and shortens
// every name the machine prints. A name that is not of this form (a foreign
// child) passes through unchanged. The write barrier's name
// zklock-sweep-barrier-<our guid> prints as zklock-sweep-barrier-us.
// Tags are the machine's own: it numbers its requests 1, 2, 3... from
// construction, so a transcript names them as printed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "lock_machine.hpp"
#include "zklock/protocol/node_name.hpp"

#ifndef ZKLOCK_TRANSCRIPT_DIR
#error "ZKLOCK_TRANSCRIPT_DIR: the testdata directory (tests/CMakeLists.txt defines it)"
#endif

namespace zklock::detail {
namespace {

namespace fs = std::filesystem;
using Kind = MachineEvent::Kind;
using Req = MachineRequest::Kind;
using Out = MachineOutcome::Kind;

// The machine's GUID in every transcript: fixed, so names and output are stable.
constexpr const char* kGuid = "a1b2c3d4e5f6a7b8c9d0e1f2deadbeef";
constexpr std::string_view kBarrierPrefix = "zklock-sweep-barrier-";

const std::vector<std::pair<Kind, std::string>>& event_names() {
  static const std::vector<std::pair<Kind, std::string>> names = {
      {Kind::created, "created"},
      {Kind::parents_made, "parents_made"},
      {Kind::listed, "listed"},
      {Kind::stats_read, "stats_read"},
      {Kind::blocker_checked, "blocker_checked"},
      {Kind::marker_read, "marker_read"},
      {Kind::own_checked, "own_checked"},
      {Kind::record_read, "record_read"},
      {Kind::removed, "removed"},
      {Kind::blocker_probed, "blocker_probed"},
      {Kind::blocker_deleted, "blocker_deleted"},
      {Kind::own_deleted, "own_deleted"},
      {Kind::own_changed, "own_changed"},
      {Kind::children_changed, "children_changed"},
      {Kind::disconnected, "disconnected"},
      {Kind::reconnected, "reconnected"},
      {Kind::expired, "expired"},
      {Kind::validity_expired, "validity_expired"},
      {Kind::validity_proven, "validity_proven"},
      {Kind::watchdog, "watchdog"},
      {Kind::cancel, "cancel"},
      {Kind::release, "release"},
      {Kind::retake, "retake"},
      {Kind::retain_over, "retain_over"},
  };
  return names;
}

const char* rc_name(Rc rc) {
  switch (rc) {
    case Rc::ok: return "ok";
    case Rc::no_node: return "no_node";
    case Rc::node_exists: return "node_exists";
    case Rc::connection_loss: return "connection_loss";
    case Rc::session_expired: return "session_expired";
    case Rc::error: return "error";
  }
  return "?";
}

Rc parse_rc(const std::string& s) {
  for (Rc rc : {Rc::ok, Rc::no_node, Rc::node_exists, Rc::connection_loss, Rc::session_expired, Rc::error}) {
    if (s == rc_name(rc)) return rc;
  }
  throw std::runtime_error("unknown rc '" + s + "'");
}

Errc parse_errc(const std::string& s) {
  for (int i = 0; i <= static_cast<int>(Errc::io_error); ++i) {
    if (errc_name(static_cast<Errc>(i)) == s) return static_cast<Errc>(i);
  }
  throw std::runtime_error("unknown errc '" + s + "'");
}

std::int64_t parse_int(const std::string& s) {
  std::int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) throw std::runtime_error("not a number: '" + s + "'");
  return v;
}

std::string hex8(std::uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

std::vector<std::string> split(const std::string& s, char sep) {
  std::vector<std::string> out;
  if (s.empty()) return out;
  std::size_t start = 0;
  for (;;) {
    const auto p = s.find(sep, start);
    out.push_back(s.substr(start, p - start));
    if (p == std::string::npos) return out;
    start = p + 1;
  }
}

// Short names <-> real child names.
class Names {
 public:
  // w_us0_5 -> w_<owner key of "us">_<our guid, create 0>_0000000005
  std::string expand(const std::string& s) {
    const auto a = s.find('_'), b = s.rfind('_');
    if (a != 1 || b == a || (s[0] != 'w' && s[0] != 'r')) return s;  // foreign: verbatim
    const std::string who = s.substr(2, b - 2);
    std::int64_t seq = 0;
    try {
      seq = parse_int(s.substr(b + 1));
    } catch (const std::exception&) {
      return s;
    }
    if (who.empty() || seq < INT32_MIN || seq > INT32_MAX) return s;
    std::string guid, key;
    if (auto n = ours(who)) {
      guid = std::string(kGuid).substr(0, 24) + hex8(*n);
      key = protocol::owner_key("us");
    } else {
      guid = protocol::owner_key(who) + protocol::owner_key("guid of " + who);
      key = protocol::owner_key(who);
      who_by_guid_[guid] = who;
    }
    char suffix[16];
    std::snprintf(suffix, sizeof suffix, "%010d", static_cast<int>(seq));
    return protocol::lock_node_prefix(s[0] == 'r' ? Mode::shared : Mode::exclusive, key, guid) + suffix;
  }

  // Every lock node name in a message, shortened.
  std::string shorten_in(const std::string& text) const {
    std::string out;
    for (std::size_t p = 0; p < text.size();) {
      const bool start = (text[p] == 'w' || text[p] == 'r') && p + 1 < text.size() && text[p + 1] == '_' &&
                         (p == 0 || !std::isalnum(static_cast<unsigned char>(text[p - 1])));
      if (start) {
        std::size_t end = p + 1;
        while (end < text.size() && (std::isxdigit(static_cast<unsigned char>(text[end])) || text[end] == '_' ||
                                     text[end] == '-')) {
          ++end;
        }
        const auto word = text.substr(p, end - p);
        if (protocol::parse_lock_node_name(word)) {
          out += shorten(word);
          p = end;
          continue;
        }
      }
      out += text[p++];
    }
    return out;
  }

  std::string shorten(const std::string& name) const {
    if (name == std::string(kBarrierPrefix) + kGuid) return std::string(kBarrierPrefix) + "us";
    if (name.size() == 32 && name.substr(0, 24) == std::string(kGuid).substr(0, 24)) {  // a create's GUID
      return "us" + std::to_string(std::stoul(name.substr(24), nullptr, 16));
    }
    const auto p = protocol::parse_lock_node_name(name);
    if (!p) return name;
    std::string who;
    if (p->guid.substr(0, 24) == std::string(kGuid).substr(0, 24)) {
      who = "us" + std::to_string(std::stoul(p->guid.substr(24), nullptr, 16));
    } else if (auto it = who_by_guid_.find(p->guid); it != who_by_guid_.end()) {
      who = it->second;
    } else {
      return name;
    }
    return std::string(p->mode == Mode::shared ? "r" : "w") + "_" + who + "_" + std::to_string(p->sequence);
  }

 private:
  static std::optional<std::uint32_t> ours(const std::string& who) {
    if (who.size() < 3 || who.substr(0, 2) != "us") return std::nullopt;
    const auto digits = who.substr(2);
    if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
    return static_cast<std::uint32_t>(std::stoul(digits));
  }
  std::map<std::string, std::string> who_by_guid_;
};

// key=value words; a value may be "quoted text" or 'quoted text' (no escapes).
std::map<std::string, std::string> parse_args(const std::string& text, std::string& head) {
  std::map<std::string, std::string> args;
  std::size_t i = 0;
  const auto skip = [&] {
    while (i < text.size() && text[i] == ' ') ++i;
  };
  skip();
  while (i < text.size() && text[i] != ' ') head += text[i++];
  for (skip(); i < text.size(); skip()) {
    std::string key;
    while (i < text.size() && text[i] != '=' && text[i] != ' ') key += text[i++];
    if (i >= text.size() || text[i] != '=') throw std::runtime_error("expected key=value at '" + key + "'");
    ++i;
    std::string value;
    if (i < text.size() && (text[i] == '"' || text[i] == '\'')) {
      const auto close = text.find(text[i], i + 1);
      if (close == std::string::npos) throw std::runtime_error("unterminated quote after " + key + "=");
      value = text.substr(i + 1, close - i - 1);
      i = close + 1;
    } else {
      while (i < text.size() && text[i] != ' ') value += text[i++];
    }
    if (!args.emplace(key, value).second) throw std::runtime_error("duplicate key " + key);
  }
  return args;
}

MachineConfig parse_config(const std::string& line) {
  std::string head;
  auto args = parse_args(line, head);
  MachineConfig cfg;
  cfg.guid = kGuid;
  cfg.epoch = 1;
  cfg.lock_path = "/locks/demo";
  cfg.history = LockHistory::contended;  // listings without the children watch unless a file says otherwise
  const auto flag = [](const std::string& v) {
    if (v == "yes") return true;
    if (v == "no") return false;
    throw std::runtime_error("a flag is yes or no, not '" + v + "'");
  };
  for (const auto& [k, v] : args) {
    if (k == "mode") {
      if (v != "exclusive" && v != "shared") throw std::runtime_error("mode: exclusive or shared");
      cfg.mode = v == "shared" ? Mode::shared : Mode::exclusive;
    } else if (k == "policy") {
      if (v != "tolerant" && v != "strict") throw std::runtime_error("policy: tolerant or strict");
      cfg.holder.policy = v == "strict" ? LossPolicy::strict : LossPolicy::tolerant;
    } else if (k == "retain") {
      cfg.retain = flag(v);
    } else if (k == "history") {
      if (v != "unknown" && v != "free" && v != "contended") throw std::runtime_error("history: unknown, free or contended");
      cfg.history = v == "free" ? LockHistory::free : v == "contended" ? LockHistory::contended : LockHistory::unknown;
    } else if (k == "epoch") {
      cfg.epoch = static_cast<std::uint64_t>(parse_int(v));
    } else if (k == "lock") {
      cfg.lock_path = v;
    } else {
      throw std::runtime_error("unknown config key " + k);
    }
  }
  return cfg;
}

MachineEvent parse_event(const std::string& text, const MachineConfig& cfg, Names& names) {
  std::string head;
  auto args = parse_args(text, head);
  const auto& kinds = event_names();
  const auto it = std::find_if(kinds.begin(), kinds.end(), [&](const auto& p) { return p.second == head; });
  if (it == kinds.end()) throw std::runtime_error("unknown event '" + head + "'");
  MachineEvent ev{it->first};
  ev.epoch = cfg.epoch;
  ev.within_bound = true;  // every event inside the bound unless bound=lapsed (or none)
  ev.confirmed = true;     // a retake with the node confirmed recently unless confirmed=stale
  ev.may_retain = true;    // a release by an owner with nothing else under way unless owner=busy
  for (const auto& [k, v] : args) {
    if (k == "tag") {
      ev.tag = static_cast<std::uint64_t>(parse_int(v));
    } else if (k == "epoch") {
      ev.epoch = static_cast<std::uint64_t>(parse_int(v));
    } else if (k == "rc") {
      ev.rc = parse_rc(v);
    } else if (k == "name") {
      ev.name = names.expand(v);
    } else if (k == "czxid") {
      ev.czxid = parse_int(v);
    } else if (k == "bound") {
      if (v != "held" && v != "lapsed" && v != "none") throw std::runtime_error("bound=held|lapsed|none, not '" + v + "'");
      ev.within_bound = v == "held";
      ev.no_bound = v == "none";  // the session's settings prove no bound
    } else if (k == "owner") {
      if (v != "idle" && v != "busy") throw std::runtime_error("owner=idle|busy, not '" + v + "'");
      ev.may_retain = v == "idle";
    } else if (k == "cancelled") {
      if (v != "yes" && v != "no") throw std::runtime_error("cancelled=yes|no, not '" + v + "'");
      ev.cancelled = v == "yes";
    } else if (k == "confirmed") {
      if (v != "recent" && v != "stale") throw std::runtime_error("confirmed=recent|stale, not '" + v + "'");
      ev.confirmed = v == "recent";
    } else if (k == "children") {
      for (const auto& c : split(v, ',')) ev.children.push_back(names.expand(c));
    } else if (k == "stats") {
      for (const auto& s : split(v, ',')) {
        const auto colon = s.find(':');
        NodeStat st;
        st.rc = parse_rc(s.substr(0, colon));
        if (colon != std::string::npos) st.czxid = parse_int(s.substr(colon + 1));
        ev.stats.push_back(st);
      }
    } else if (k == "data") {
      ev.data = names.expand(v);
    } else if (k == "errc") {
      ev.errc = parse_errc(v);
    } else if (k == "detail") {
      ev.detail = v;
    } else {
      throw std::runtime_error("unknown event key " + k);
    }
  }
  return ev;
}

std::string print_request(const MachineRequest& c, const Names& names) {
  std::string s;
  const auto tag = [&] { return " tag=" + std::to_string(c.tag); };
  const auto name = [&] { return " name=" + names.shorten(c.name); };
  switch (c.kind) {
    case Req::create: return "create" + tag() + " guid=" + names.shorten(c.name);
    case Req::make_parents: return "make_parents" + tag();
    case Req::list: return "list" + tag();
    case Req::list_watch: return "list_watch" + tag();
    case Req::read_stats: {
      s = "read_stats" + tag() + " names=";
      for (std::size_t i = 0; i < c.names.size(); ++i) s += (i ? "," : "") + names.shorten(c.names[i]);
      return s;
    }
    case Req::watch_blocker: return "watch_blocker" + tag() + name();
    case Req::read_marker: return "read_marker" + tag();
    case Req::watch_own: return "watch_own" + tag() + name();
    case Req::read_record: return "read_record" + tag() + name();
    case Req::remove: return "remove" + tag() + name() + (c.with_marker ? " +marker" : "");
    case Req::remove_extra: return "remove_extra" + tag() + name();
    case Req::probe_blocker: return "probe_blocker" + tag() + name();
  }
  return "?";
}

std::string print_outcome(const MachineOutcome& c, const Names& names) {
  const auto quoted = [&](const std::string& m) { return " \"" + names.shorten_in(m) + "\""; };
  switch (c.kind) {
    case Out::granted:  // as the token's text form: ".<ordinal>" on a re-take
      return "outcome granted token=" + std::to_string(c.token) + (c.ordinal ? "." + std::to_string(c.ordinal) : "");
    case Out::failed: return "outcome failed errc=" + std::string(errc_name(c.errc)) + quoted(c.message);
    case Out::lost: return "outcome lost reason=" + std::string(loss_reason_name(c.reason)) + quoted(c.message);
    case Out::released: return "outcome released";
    case Out::retake_void: return "outcome retake_void" + quoted(c.message);
    case Out::notice: return "notice" + quoted(c.message);
    case Out::diverged: return "outcome diverged" + quoted(c.message);
  }
  return "?";
}

// A step's output as the shell executes it: the requests, then the outcomes.
void print_commands(const MachineCommands& cmds, const Names& names, std::vector<std::string>& printed) {
  for (const auto& r : cmds.requests) printed.push_back(print_request(r, names));
  for (const auto& o : cmds.outcomes) printed.push_back(print_outcome(o, names));
}

const char* phase_name(LockMachine::Phase p) {
  using P = LockMachine::Phase;
  switch (p) {
    case P::idle: return "idle";
    case P::acquiring: return "acquiring";
    case P::proving: return "proving";
    case P::held: return "held";
    case P::releasing: return "releasing";
    case P::retained: return "retained";
    case P::ending: return "ending";
    case P::failed: return "failed";
    case P::released: return "released";
  }
  return "?";
}

std::string print_state(const LockMachine& m, const Names& names) {
  const auto yn = [](bool b) { return b ? "yes" : "no"; };
  std::string s = "state phase=" + std::string(phase_name(m.phase()));
  s += std::string(" holding=") + yn(m.holding());
  s += std::string(" suspended=") + yn(m.suspended());
  s += " loss=" + (m.loss() ? std::string(loss_reason_name(*m.loss())) : std::string("none"));
  s += " node=" + (m.node_name().empty() ? std::string("none") : names.shorten(m.node_name()));
  s += std::string(" finished=") + yn(m.finished());
  if (m.config().retain) s += " confirmations=" + std::to_string(m.confirmations());
  return s;
}

bool is_output(const std::string& line) { return line.starts_with("  "); }

// Replays a transcript; returns the file as it should read: every line but the
// output lines kept, each input followed by the output the machine produced.
std::vector<std::string> replay(const std::vector<std::string>& lines) {
  std::vector<std::string> out;
  std::optional<MachineConfig> cfg;
  std::optional<LockMachine> m;
  Names names;
  for (std::size_t n = 0; n < lines.size(); ++n) {
    const auto& line = lines[n];
    if (is_output(line)) continue;
    out.push_back(line);
    if (line.empty() || line[0] == '#') continue;
    try {
      if (line.starts_with("config")) {  // a new machine: the story's next variant
        cfg = parse_config(line);
        m.reset();
        continue;
      }
      if (!line.starts_with("> ")) throw std::runtime_error("not a comment, config, input or indented output line");
      const auto input = line.substr(2);
      std::vector<std::string> printed;
      if (input == "start") {
        if (!cfg) throw std::runtime_error("`> start` before the config line");
        if (m) throw std::runtime_error("a second `> start` (a new machine starts with a config line)");
        m.emplace(*cfg);
        print_commands(m->start(), names, printed);
      } else if (!m) {
        throw std::runtime_error("an input before `> start`");
      } else if (input == "state") {
        printed.push_back(print_state(*m, names));
      } else {
        print_commands(m->step(parse_event(input, *cfg, names)), names, printed);
      }
      if (printed.empty()) printed.push_back("(nothing)");
      for (const auto& p : printed) out.push_back("  " + p);
    } catch (const std::exception& e) {
      throw std::runtime_error("line " + std::to_string(n + 1) + ": " + e.what() + "\n  " + line);
    }
  }
  return out;
}

// A line diff (LCS), printed with 3 lines of context around each change.
std::string unified_diff(const std::vector<std::string>& a, const std::vector<std::string>& b) {
  const std::size_t n = a.size(), m = b.size();
  std::vector<std::vector<std::size_t>> lcs(n + 1, std::vector<std::size_t>(m + 1, 0));
  for (std::size_t i = n; i-- > 0;) {
    for (std::size_t j = m; j-- > 0;) {
      lcs[i][j] = a[i] == b[j] ? lcs[i + 1][j + 1] + 1 : std::max(lcs[i + 1][j], lcs[i][j + 1]);
    }
  }
  struct Op {
    char kind;
    std::size_t ai, bi;
  };
  std::vector<Op> ops;
  std::size_t i = 0, j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] == b[j]) ops.push_back({' ', i++, j++});
    else if (i < n && (j == m || lcs[i + 1][j] >= lcs[i][j + 1])) ops.push_back({'-', i++, j});
    else ops.push_back({'+', i, j++});
  }
  // Show each change with kContext unchanged lines on either side; a gap of
  // hidden lines starts a new hunk.
  constexpr std::size_t kContext = 3;
  std::vector<bool> shown(ops.size(), false);
  for (std::size_t k = 0; k < ops.size(); ++k) {
    if (ops[k].kind == ' ') continue;
    const std::size_t lo = k >= kContext ? k - kContext : 0, hi = std::min(ops.size(), k + kContext + 1);
    for (std::size_t t = lo; t < hi; ++t) shown[t] = true;
  }
  std::string s;
  for (std::size_t k = 0; k < ops.size(); ++k) {
    if (!shown[k]) continue;
    if (k == 0 || !shown[k - 1]) {
      s += "@@ expected line " + std::to_string(ops[k].ai + 1) + ", actual line " + std::to_string(ops[k].bi + 1) + " @@\n";
    }
    s += ops[k].kind;
    s += (ops[k].kind == '+' ? b[ops[k].bi] : a[ops[k].ai]) + "\n";
  }
  return s;
}

std::vector<std::string> read_lines(const fs::path& p) {
  std::ifstream in(p);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  return lines;
}

std::vector<fs::path> transcripts() {
  std::vector<fs::path> files;
  for (const auto& e : fs::directory_iterator(ZKLOCK_TRANSCRIPT_DIR)) {
    if (e.path().extension() == ".txt") files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

class Transcript : public testing::TestWithParam<fs::path> {};

TEST_P(Transcript, Replays) {
  const auto& path = GetParam();
  const auto expected = read_lines(path);
  ASSERT_FALSE(expected.empty()) << path << " is empty or unreadable";
  std::vector<std::string> actual;
  try {
    actual = replay(expected);
  } catch (const std::exception& e) {
    FAIL() << path.string() << ":" << e.what();
  }
  if (actual == expected) return;
  if (const char* rw = std::getenv("ZKLOCK_TRANSCRIPT_REWRITE"); rw && std::string(rw) == "1") {
    std::ofstream out(path, std::ios::trunc);
    for (const auto& l : actual) out << l << "\n";
    std::cout << "rewrote " << path.string() << "\n";
    return;
  }
  std::string text;
  for (const auto& l : actual) text += l + "\n";
  ADD_FAILURE() << path.string() << " does not match what the machine does (- expected, + actual):\n"
                << unified_diff(expected, actual) << "\nThe actual transcript:\n"
                << text << "\n(ZKLOCK_TRANSCRIPT_REWRITE=1 rewrites the file with it.)";
}

INSTANTIATE_TEST_SUITE_P(LockMachine, Transcript, testing::ValuesIn(transcripts()),
                         [](const testing::TestParamInfo<fs::path>& info) {
                           std::string name = info.param.stem().string();
                           for (char& c : name) {
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           }
                           return name;
                         });

// The folder holds the machine's recovery stories: an
// empty or misplaced folder must not pass as "no transcript failed".
TEST(TranscriptFolder, HoldsTheStories) { EXPECT_GE(transcripts().size(), 7u) << ZKLOCK_TRANSCRIPT_DIR; }

// A hand-checked round trip of the short names the transcripts use.
TEST(TranscriptNames, ShortNamesRoundTrip) {
  Names names;
  const auto ours = names.expand("w_us1_7");
  const auto parsed = protocol::parse_lock_node_name(ours);
  ASSERT_TRUE(parsed);
  EXPECT_EQ(parsed->guid, std::string(kGuid).substr(0, 24) + "00000001");
  EXPECT_EQ(parsed->sequence, 7);
  EXPECT_EQ(names.shorten(ours), "w_us1_7");
  const auto theirs = names.expand("r_bob_-2147483648");
  ASSERT_TRUE(protocol::parse_lock_node_name(theirs));
  EXPECT_EQ(protocol::parse_lock_node_name(theirs)->mode, Mode::shared);
  EXPECT_EQ(names.shorten(theirs), "r_bob_-2147483648");
  EXPECT_EQ(names.expand("leader"), "leader");  // foreign children pass through
  EXPECT_EQ(names.shorten_in("node " + ours + " of /locks/x/" + theirs + "."), "node w_us1_7 of /locks/x/r_bob_-2147483648.");
}

}  // namespace
}  // namespace zklock::detail
