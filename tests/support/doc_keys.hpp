// The key names of zklock's JSON documents, as docs/*.md show them and as a
// rendering has them. The key names the CLI and the detector emit are a
// contract (docs/cli.md, "Stability"): tests compare the two sets, so a key
// renamed in the code (or in the docs) fails a test.
//
// Header-only; a test that uses it defines ZKLOCK_SOURCE_DIR (the checkout).
#pragma once

#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

namespace zklock::test {

// docs/<name> of the checkout, whole.
inline std::string read_doc(const std::string& name) {
  std::ifstream in(std::string(ZKLOCK_SOURCE_DIR) + "/docs/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  if (ss.str().empty()) throw std::runtime_error("cannot read docs/" + name);
  return ss.str();
}

// The text from the first occurrence of `start` to (not including) the first
// following `end` (the end of the doc when `end` is empty).
inline std::string doc_between(const std::string& doc, const std::string& start, const std::string& end) {
  const auto s = doc.find(start);
  if (s == std::string::npos) throw std::runtime_error("no '" + start + "' in the doc");
  if (end.empty()) return doc.substr(s);
  const auto e = doc.find(end, s + start.size());
  if (e == std::string::npos) throw std::runtime_error("no '" + end + "' after '" + start + "'");
  return doc.substr(s, e - s);
}

// A Markdown section: from the heading line that starts with `heading` (say
// "### `zklock ls") to the next heading of the same or a higher level
// outside a fenced block (a shell comment in one is no heading).
inline std::string doc_section(const std::string& doc, const std::string& heading) {
  const auto at = doc.find("\n" + heading);
  if (at == std::string::npos) throw std::runtime_error("no heading '" + heading + "' in the doc");
  const auto level = heading.find_first_not_of('#');
  bool fenced = false;
  std::size_t end = doc.find('\n', at + 1);
  for (; end != std::string::npos; end = doc.find('\n', end + 1)) {
    const auto line = doc.substr(end + 1, doc.find('\n', end + 1) - end - 1);
    if (line.starts_with("```")) fenced = !fenced;
    const auto hashes = line.find_first_not_of('#');
    if (!fenced && hashes > 0 && hashes <= level && hashes < line.size() && line[hashes] == ' ') break;
  }
  return doc.substr(at + 1, end == std::string::npos ? std::string::npos : end - at - 1);
}

// Every "key": in the code of `text`: in fenced blocks and `inline spans`,
// each scanned on its own so an odd quote in prose cannot shift the pairing
// (a block left open, cut off by doc_between, runs to the end of `text`).
// The examples elide values (…, /* as in cycles */), so they are not JSON
// themselves. Scanned by hand: std::regex trips GCC 12's
// -Wmaybe-uninitialized in the sanitizer builds, where warnings are errors.
inline std::set<std::string> doc_keys(const std::string& text) {
  std::set<std::string> out;
  const auto scan = [&](const std::string& code) {
    for (std::size_t open = code.find('"'); open != std::string::npos; open = code.find('"', open + 1)) {
      const auto close = code.find('"', open + 1);
      if (close == std::string::npos) break;
      auto after = close + 1;
      while (after < code.size() && code[after] == ' ') ++after;
      if (after < code.size() && code[after] == ':') out.insert(code.substr(open + 1, close - open - 1));
      open = close;
    }
  };
  std::size_t at = 0;
  while ((at = text.find('`', at)) != std::string::npos) {
    const bool fenced = text.compare(at, 3, "```") == 0;
    const auto from = at + (fenced ? 3 : 1);
    const auto to = text.find(fenced ? "```" : "`", from);
    scan(text.substr(from, to == std::string::npos ? std::string::npos : to - from));  // unclosed: to the end
    if (to == std::string::npos) break;
    at = to + (fenced ? 3 : 1);
  }
  return out;
}

// Every key of every object in `j`, at any depth.
inline void collect_keys(const nlohmann::json& j, std::set<std::string>& out) {
  if (j.is_object()) {
    for (const auto& [k, v] : j.items()) {
      out.insert(k);
      collect_keys(v, out);
    }
  } else if (j.is_array()) {
    for (const auto& v : j) collect_keys(v, out);
  }
}

inline std::set<std::string> json_keys(const nlohmann::json& j) {
  std::set<std::string> out;
  collect_keys(j, out);
  return out;
}

// The members of `a` that `b` lacks, for a failure message.
inline std::string missing_from(const std::set<std::string>& a, const std::set<std::string>& b) {
  std::string out;
  for (const auto& k : a) {
    if (!b.count(k)) out += (out.empty() ? "" : ", ") + k;
  }
  return out.empty() ? "(none)" : out;
}

}  // namespace zklock::test
