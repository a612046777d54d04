// The nemesis run's judgement of safety (a, b), its figures, and the
// evidence a failing run keeps (tests/faults/nemesis_test.cpp states the
// criteria; liveness (c) and the empty lock path (d) are checked as the run
// goes, in nemesis_run.hpp).
#pragma once

#include <cstdint>
#include <fstream>
#include <limits>
#include <map>
#include <set>

#include "nemesis_run.hpp"

namespace zklock::stories {

class RunJudge : public Run {
 public:
  using Run::Run;

 private:
  std::string digests_;  // check_members: each member's zk_digest_mismatches_count
  std::vector<std::string> digest_findings_;

 public:
  void judge() {
    // (a) In the order the grants became valid (first true sample), czxids
    // strictly increase; and no two grants share a token.
    std::vector<const Grant*> by_valid;
    std::set<std::int64_t> seen;
    for (auto& g : grants_) {
      if (!seen.insert(g.czxid).second) fail("(a) two grants with czxid " + std::to_string(g.czxid));
      if (g.first_valid >= 0) by_valid.push_back(&g);
    }
    std::sort(by_valid.begin(), by_valid.end(), [](auto* a, auto* b) { return a->first_valid < b->first_valid; });
    for (std::size_t i = 1; i < by_valid.size(); ++i) {
      const Grant &p = *by_valid[i - 1], &g = *by_valid[i];
      if (g.czxid <= p.czxid)
        fail("(a) token order: " + name(g) + "'s czxid " + std::to_string(g.czxid) + " valid from " +
             at(g.first_valid) + ", after " + name(p) + "'s czxid " + std::to_string(p.czxid) + " valid from " +
             at(p.first_valid));
    }
    // (b) Every earlier token's last true valid() sample precedes a later
    // grant's return. Grants in token order; the latest true sample so far.
    std::vector<const Grant*> by_token;
    for (auto& g : grants_) by_token.push_back(&g);
    std::sort(by_token.begin(), by_token.end(), [](auto* a, auto* b) { return a->czxid < b->czxid; });
    for (std::size_t i = 0; i < by_token.size(); ++i) {
      const Grant* g = by_token[i];
      const Grant* worst = nullptr;  // the other contender's earlier lease with the latest true sample
      for (std::size_t j = 0; j < i; ++j) {
        const Grant* e = by_token[j];
        if (e->contender != g->contender && e->last_valid >= 0 && (!worst || e->last_valid > worst->last_valid))
          worst = e;
      }
      if (worst == nullptr) continue;
      const std::int64_t margin = g->granted_at - worst->last_valid;
      closest_us_ = std::min(closest_us_, margin);
      if (margin < 0)
        fail("(b) " + name(*worst) + "'s lease (czxid " + std::to_string(worst->czxid) + ") reported valid() at " +
             at(worst->last_valid) + ", " + std::to_string(-margin / 1000) + " ms after " + name(*g) +
             " was granted czxid " + std::to_string(g->czxid) + " at " + at(g->granted_at));
    }
    for (auto& g : grants_) {
      if (!g.released) fail("(b) " + name(g) + "'s grant czxid " + std::to_string(g.czxid) + " was never released");
    }
  }

  std::string summary(std::uint64_t seed) const {
    int valid_at = 0, later_valid = 0, never_valid = 0, revalid = 0, handoffs = 0, clients = 0, timeouts = 0,
        errors = 0;
    for (auto& g : grants_) {
      valid_at += g.valid_at_grant;
      if (!g.valid_at_grant && g.first_valid >= 0) ++later_valid;
      never_valid += g.first_valid < 0;
      revalid += g.revalid;
    }
    std::vector<const Grant*> by_token;
    for (auto& g : grants_) by_token.push_back(&g);
    std::sort(by_token.begin(), by_token.end(), [](auto* a, auto* b) { return a->czxid < b->czxid; });
    for (std::size_t i = 1; i < by_token.size(); ++i) handoffs += by_token[i]->contender != by_token[i - 1]->contender;
    std::string per;
    for (auto& c : contenders_) {
      clients += c.clients;
      timeouts += c.timeouts;
      errors += c.errors;
      per += " " + c.name + (c.index % 2 == 1 ? "(retain)" : "") + "=" + std::to_string(c.grants.size());
    }
    std::map<std::string, int> kinds;
    for (auto& f : faults_) ++kinds[f.kind];
    std::string out;
    auto line = [&](const std::string& s) { out += "[nemesis] " + s + "\n"; };
    line("seed=" + std::to_string(seed) + ": " + std::to_string(grants_.size()) + " grants (" + per.substr(1) +
         "), " + std::to_string(handoffs) + " hand-offs; " + std::to_string(grants_.size() - valid_at) +
         " grants returned with valid() false (" + std::to_string(later_valid) + " valid later, " +
         std::to_string(never_valid) + " never during the hold), " + std::to_string(revalid) +
         " valid again after a false sample; " + std::to_string(timeouts) + " timeouts, " + std::to_string(errors) +
         " acquire errors, " + std::to_string(clients - kContenders) + " Clients re-created");
    std::string k;
    for (auto& [name, n] : kinds) k += " " + name + "=" + std::to_string(n);
    line(std::to_string(faults_.size()) + " faults:" + k);
    const auto& w = worst_liveness_;
    line("liveness bound " + std::to_string(kLivenessMs) + " ms; worst observed " +
         (w.worst_contender.empty() ? std::string("n/a")
                                    : (w.worst_ms < 0 ? "never" : std::to_string(w.worst_ms) + " ms") + " (" +
                                          w.worst_contender + " after " + w.kind + " " + w.target + ")") +
         "; head with waiters, owner connected on its session: worst " + std::to_string(worst_head_live_ms_) +
         " ms (bound " + std::to_string(kHeadLiveMs) + "), any head: worst " + std::to_string(worst_head_any_ms_) +
         " ms (bound " + std::to_string(kHeadStaleMs) + ")");
    line("(b) closest approach: a grant " +
         (closest_us_ == std::numeric_limits<std::int64_t>::max() ? std::string("n/a")
                                                                    : std::to_string(closest_us_ / 1000) + " ms") +
         " after another contender's last true valid() sample (tolerance 0)");
    line("schedule:");
    for (std::size_t i = 0; i < faults_.size(); ++i) {
      const auto& f = faults_[i];
      out += "  #" + std::to_string(i + 1) + " " + at(f.start_us) + " " + f.kind + " " + f.target + " " +
             std::to_string(f.dur_ms) + " ms, healed " + at(f.heal_us) + "; " +
             (!f.judged         ? std::string("the next fault followed at once (not judged)")
              : f.worst_ms < 0  ? "every contender granted: NOT within the bound (" + f.worst_contender + ")"
                                : "every contender granted " + std::to_string(f.worst_ms) + " ms after (last " +
                                     f.worst_contender + ")") +
             f.note + "\n";
    }
    return out;
  }

  // After the final heal, the servers' own verdict, apart from zklock's:
  // every member lists the lock alike (polled up to 30 s: a follower may
  // lag), and reports zk_digest_mismatches_count 0 in `mntr` (its data
  // tree's digest agreed with the leader's on every transaction). Debian's
  // 3.8.0 lacks the later fixes for a committed transaction lost on one
  // member (ZOOKEEPER-4785); a member that diverged is the server's fault,
  // named with both listings. Returns the listings' findings (empty: all
  // agree); the digests' are digest_findings() (see nemesis_test.cpp).
  std::vector<std::string> check_members() {
    constexpr int n = NemesisEnsemble::kSize;
    std::vector<std::vector<std::string>> views(n);
    std::vector<int> rcs(n, ZOK);
    const auto read_all = [&] {
      for (int i = 0; i < n; ++i) {
        views[static_cast<std::size_t>(i)].clear();
        try {
          auto h = test::ZkHandle::connect(ens_.member(i).connect_string(), 5000ms);
          rcs[static_cast<std::size_t>(i)] = h.children(lock_, &views[static_cast<std::size_t>(i)]);
        } catch (const std::exception&) {
          rcs[static_cast<std::size_t>(i)] = ZCONNECTIONLOSS;
        }
        std::sort(views[static_cast<std::size_t>(i)].begin(), views[static_cast<std::size_t>(i)].end());
      }
      for (int i = 1; i < n; ++i) {
        if (views[static_cast<std::size_t>(i)] != views[0] || rcs[static_cast<std::size_t>(i)] != rcs[0]) return false;
      }
      return true;
    };
    std::vector<std::string> findings;
    const auto shown = [&](int i) {
      std::string s = "[";
      for (const auto& v : views[static_cast<std::size_t>(i)]) s += (s.size() > 1 ? " " : "") + v;
      return s + "] (rc " + std::to_string(rcs[static_cast<std::size_t>(i)]) + ")";
    };
    if (!eventually(read_all, 30000ms)) {
      std::string views_text;
      for (int i = 0; i < n; ++i) views_text += " member" + std::to_string(i) + " " + shown(i) + ";";
      findings.push_back("members list " + lock_ + " differently 30 s after the heal:" + views_text);
    }
    digests_.clear();
    for (int i = 0; i < n; ++i) {
      std::int64_t mismatches = -1;
      try {
        mismatches = ens_.member(i).mntr().counter("zk_digest_mismatches_count").value_or(-1);
      } catch (const std::exception&) {
      }
      digests_ += " member" + std::to_string(i) + "=" + std::to_string(mismatches);
      if (mismatches > 0) {
        const int other = i == 0 ? 1 : 0;  // another member's view beside its own
        digest_findings_.push_back("member" + std::to_string(i) + " reports zk_digest_mismatches_count " +
                           std::to_string(mismatches) + ": its tree disagreed with the leader's; it lists " +
                           lock_ + " as " + shown(i) + ", member" + std::to_string(other) + " as " + shown(other));
      }
    }
    return findings;
  }
  const std::string& digests() const { return digests_; }
  const std::vector<std::string>& digest_findings() const { return digest_findings_; }

  // Copies what a failing run leaves into <tmp>/nemesis-<seed>/; returns it.
  std::filesystem::path keep_evidence(std::uint64_t seed, const std::string& summary) {
    namespace fs = std::filesystem;
    const fs::path dir = fs::temp_directory_path() / ("nemesis-" + std::to_string(seed));
    std::error_code ec;
    fs::create_directories(dir, ec);
    {
      std::ofstream s(dir / "summary.txt");
      s << summary << "failures:\n";
      for (auto& f : failures_) s << "  " << f << "\n";
    }
    std::ofstream(dir / "queue.log") << "# the lock's queue as the test's listings saw it (owner:sequence)\n"
                                     << queue_log_;
    for (auto& c : contenders_) {
      std::ofstream ev(dir / (c.name + ".events"));
      for (auto& e : c.events) ev << "+" << (e.t_us - t0_) / 1000 << "ms " << e.raw << "\n";
      fs::copy_file(c.stderr_file, dir / (c.name + ".stderr"), fs::copy_options::overwrite_existing, ec);
    }
    fs::copy_file(dir_ / "probe.zk.log", dir / "probe.zk.log", fs::copy_options::overwrite_existing, ec);
    for (int i = 0; i < NemesisEnsemble::kSize; ++i) {
      const auto m = dir / ("member" + std::to_string(i));
      fs::create_directories(m, ec);
      auto& s = ens_.member(i);
      fs::copy_file(s.log_file(), m / "zk.log", fs::copy_options::overwrite_existing, ec);
      fs::copy(s.zk_data_dir(), m / "data", fs::copy_options::recursive | fs::copy_options::overwrite_existing, ec);
    }
    return dir;
  }

 private:
  std::string name(const Grant& g) const { return contenders_[static_cast<std::size_t>(g.contender)].name; }
  std::int64_t closest_us_ = std::numeric_limits<std::int64_t>::max();
};

}  // namespace zklock::stories
