// zklock doctor: is this machine set up to use zklock? Reachability, each
// server's version and mode (the `srvr` four-letter word), the ensemble id,
// the negotiated session timeout, the root, permissions, whether a
// deadlock detector leads, and lock heads that have kept others waiting for
// --head-threshold or longer ("head not taking the lock", cli/lock_heads.hpp),
// and whether the doctor's own session stayed connected (a reconnect loop fails).
//
// Exit status: 69 when no session can be opened, 1 when a check fails,
// 0 otherwise (warnings included: a long-lived head is a warning, since a
// long hold looks the same).
#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <iostream>
#include <future>
#include <optional>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "commands.hpp"
#include "cli/lock_heads.hpp"
#include "cli/lock_tree.hpp"
#include "model/election_order.hpp"
#include "zklock/path.hpp"
#include "zklock/protocol/node_name.hpp"
#include "zklock/protocol/paths.hpp"
#include "zklock/token.hpp"

namespace zklock::cli {
namespace {

using std::chrono::milliseconds;
using SteadyClock = std::chrono::steady_clock;

struct Check {
  std::string name;
  std::string status;  // "ok", "warn", "fail"
  std::string detail;
  nlohmann::json fields = nlohmann::json::object();  // more JSON fields of this check (a finding's parts)
};

struct DoctorOptions {
  std::string head_threshold = "30s";
};

// The server's wall clock, read once from the ctime of a node we create (the
// acl probe) and carried forward on this host's monotonic clock: lock node
// ages are differences of two server times, not of two hosts' clocks. Until
// (unless) a probe was created it is this host's wall clock.
struct ServerClock {
  std::optional<std::int64_t> at_probe_ms;
  SteadyClock::time_point probe_seen{};
  std::int64_t now() const {
    if (!at_probe_ms) return now_ms();
    return *at_probe_ms + std::chrono::duration_cast<milliseconds>(SteadyClock::now() - probe_seen).count();
  }
};

// Sends a four-letter word to host:port and returns the whole answer, or
// nullopt if none came within `timeout`. Never throws.
std::optional<std::string> four_letter_word(const std::string& host, const std::string& port, const char* word,
                                            milliseconds timeout) {
  const auto deadline = SteadyClock::now() + timeout;
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  if (::getaddrinfo(host.c_str(), port.c_str(), &hints, &res) != 0 || res == nullptr) return std::nullopt;
  std::optional<std::string> answer;
  for (auto* ai = res; ai != nullptr && !answer; ai = ai->ai_next) {
    const int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) continue;
    auto remaining = [&] {
      return static_cast<int>(std::max<std::int64_t>(
          0, std::chrono::duration_cast<milliseconds>(deadline - SteadyClock::now()).count()));
    };
    bool ok = ::connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 || errno == EINPROGRESS;
    if (ok) {
      pollfd p{fd, POLLOUT, 0};
      ok = ::poll(&p, 1, remaining()) == 1;
      int err = 0;
      socklen_t len = sizeof err;
      ok = ok && ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) == 0 && err == 0;
    }
    ok = ok && ::send(fd, word, 4, MSG_NOSIGNAL) == 4;
    std::string text;
    while (ok) {
      pollfd p{fd, POLLIN, 0};
      if (::poll(&p, 1, remaining()) != 1) {
        ok = false;
        break;
      }
      char buf[4096];
      const auto n = ::recv(fd, buf, sizeof buf, 0);
      if (n < 0 && (errno == EAGAIN || errno == EINTR)) continue;
      if (n <= 0) break;
      text.append(buf, static_cast<std::size_t>(n));
    }
    if (ok && !text.empty()) answer = text;
    ::close(fd);
  }
  ::freeaddrinfo(res);
  return answer;
}

// "host:port,host:port/chroot" -> [(host, port)]
std::vector<std::pair<std::string, std::string>> servers_of(std::string connect) {
  if (const auto slash = connect.find('/'); slash != std::string::npos) connect.resize(slash);
  std::vector<std::pair<std::string, std::string>> out;
  std::size_t start = 0;
  while (start <= connect.size()) {
    auto end = connect.find(',', start);
    if (end == std::string::npos) end = connect.size();
    const std::string hp = connect.substr(start, end - start);
    if (!hp.empty()) {
      const auto colon = hp.rfind(':');
      if (colon == std::string::npos) out.emplace_back(hp, "2181");
      else out.emplace_back(hp.substr(0, colon), hp.substr(colon + 1));
    }
    start = end + 1;
  }
  return out;
}

std::string srvr_field(const std::string& text, const std::string& key) {
  const auto at = text.find(key + ": ");
  if (at == std::string::npos) return {};
  const auto begin = at + key.size() + 2;
  auto end = text.find('\n', begin);
  std::string v = text.substr(begin, end == std::string::npos ? std::string::npos : end - begin);
  if (key == "Zookeeper version") v = v.substr(0, v.find(','));
  return v;
}

// A `mntr` answer's value for `key` ("key<TAB>value" lines), or -1.
long long mntr_value(const std::string& text, const std::string& key) {
  const auto at = text.find(key + "\t");
  if (at == std::string::npos || (at != 0 && text[at - 1] != '\n')) return -1;
  try {
    return std::stoll(text.substr(at + key.size() + 1));
  } catch (const std::exception&) {
    return -1;
  }
}

// 8. Lock heads that have kept others waiting for `threshold` or longer:
// one warning per lock, else one "ok" line.
void check_heads(Client& client, const std::string& root, milliseconds threshold, const ServerClock& server_clock,
                 std::vector<Check>& checks) {
  const auto tree = read_tree(client, root);
  const auto report = find_long_heads(client, tree, server_clock.now(), threshold);
  for (const auto& f : report.findings) {
    checks.push_back({"lock " + f.lock, "warn", finding_text(f),
                      {{"finding", kHeadNotTakingTheLock},
                       {"lock", f.lock},
                       {"node", f.node},
                       {"owner", f.owner},
                       {"session", f.session},
                       {"head_ms", f.kept_waiting_ms},
                       {"since_hand_off", f.since_hand_off},
                       {"holders", f.holders},
                       {"waiters", f.waiters}}});
  }
  if (!report.findings.empty()) return;
  std::string detail = "no lock head has kept others waiting for " + format_duration(threshold) + " or longer (" +
                       std::to_string(report.with_waiters) + " with waiters";
  if (!tree.complete()) detail += "; " + std::to_string(tree.unreadable.size()) + " paths unreadable";
  if (!server_clock.at_probe_ms) detail += "; ages by this host's clock";
  checks.push_back({"lock heads", "ok", detail + ")"});
}

std::vector<Check> run_checks(const GlobalOptions& g, milliseconds head_threshold, int& exit_status) {
  std::vector<Check> checks;
  const std::string root = resolve_path(g.root, "/");
  const auto timeout = parse_duration(g.connect_timeout);

  // 1. Each server answers srvr (needs 4lw.commands.whitelist to include srvr, the default).
  for (const auto& [host, port] : servers_of(g.zk)) {
    const auto answer = four_letter_word(host, port, "srvr", std::min(timeout, milliseconds(3000)));
    Check c{"server " + host + ":" + port, "ok", ""};
    if (!answer) {
      c.status = "warn";
      c.detail = "no answer to srvr (down, or srvr not in 4lw.commands.whitelist)";
    } else if (answer->find("not currently serving") != std::string::npos) {
      c.status = "fail";
      c.detail = "not serving requests (no quorum?)";
    } else {
      c.detail = "version " + srvr_field(*answer, "Zookeeper version") + ", mode " + srvr_field(*answer, "Mode");
      // A member whose tree disagrees with the leader's (needs mntr in the whitelist; silent without it).
      const auto mntr = four_letter_word(host, port, "mntr", std::min(timeout, milliseconds(3000)));
      const auto mismatches = mntr ? mntr_value(*mntr, "zk_digest_mismatches_count") : -1;
      if (mismatches > 0) {
        c.status = "warn";
        c.detail += "; its data tree disagreed with the leader's on " + std::to_string(mismatches) +
                    " transactions (zk_digest_mismatches_count): a diverged member (docs/operations.md, "
                    "\"A diverged server\")";
      }
    }
    checks.push_back(std::move(c));
  }

  // 2. A session.
  std::unique_ptr<Client> client;
  const auto started = SteadyClock::now();
  try {
    client = connect(g);
  } catch (const CliError& e) {
    checks.push_back({"session", "fail", e.what()});
    exit_status = e.exit_code();
    return checks;
  }
  const auto took = std::chrono::duration_cast<milliseconds>(SteadyClock::now() - started);
  checks.push_back({"session", "ok", "session " + session_hex(client->session_id()) + " established in " +
                                         humanize_age(took)});
  // Counted for the last check (session stability): connections this session lost meanwhile.
  auto drops = std::make_shared<std::atomic<int>>(0);
  client->add_listener([drops](ConnectionState s) {
    if (s == ConnectionState::suspended) drops->fetch_add(1);
  });

  // 3. Negotiated session timeout.
  {
    const auto asked = client->options().session_timeout;
    const auto got = client->negotiated_timeout();
    Check c{"session timeout", "ok", "negotiated " + format_duration(got)};
    if (got != asked) {
      c.status = "warn";
      c.detail += " (requested " + format_duration(asked) + "; the server's min/max session timeout bound it)";
    }
    checks.push_back(std::move(c));
  }

  // 4. Ensemble id (read only; the first lock creates it).
  try {
    const std::string path(protocol::kEnsembleIdPath);
    const auto id = client->try_get(path);
    if (id && is_uuid(*id)) checks.push_back({"ensemble id", "ok", *id});
    else if (id) checks.push_back({"ensemble id", "fail", path + " holds no UUID: '" + id->substr(0, 64) + "'"});
    else checks.push_back({"ensemble id", "warn", "absent (created by the first lock taken)"});
  } catch (const Error& e) {
    checks.push_back({"ensemble id", "fail", e.what()});
  }

  // 5. Root, and 6. permissions on it (a probe node: create, then delete;
  // its ctime is the server's clock for check 8).
  ServerClock server_clock;
  std::optional<Stat> root_stat;
  try {
    root_stat = client->try_stat(root);
  } catch (const Error& e) {
    checks.push_back({"root", "fail", e.what()});
  }
  if (root_stat) {
    checks.push_back({"root", "ok", root + " exists (" + std::to_string(root_stat->num_children) + " children)"});
    Check c{"acl", "ok", ""};
    try {
      (void)client->children(root);
      const std::string probe = join_path(root, "zklock-doctor-" + protocol::new_guid());
      std::promise<std::pair<Status, Stat>> created;
      std::promise<Status> removed;
      client->create_async(probe, "", CreateMode::ephemeral,
                           [&created](Status s, const std::string&, const Stat& st) { created.set_value({s, st}); });
      const auto [cs, probe_stat] = created.get_future().get();
      if (cs.ok() && probe_stat.ctime != 0) {
        server_clock.at_probe_ms = probe_stat.ctime;
        server_clock.probe_seen = SteadyClock::now();
      }
      if (!cs.ok()) {
        c.status = "fail";
        c.detail = "cannot create under " + root + ": " + cs.error("create").what();
      } else {
        client->remove_async(probe, -1, [&removed](Status s) { removed.set_value(s); });
        const Status rs = removed.get_future().get();
        if (!rs.ok()) {
          c.status = "fail";
          c.detail = "cannot delete under " + root + ": " + rs.error("delete").what();
        } else {
          c.detail = "read, create and delete allowed on " + root;
        }
      }
    } catch (const Error& e) {
      c.status = "fail";
      c.detail = e.what();
    }
    checks.push_back(std::move(c));
  } else if (std::none_of(checks.begin(), checks.end(), [](const Check& c) { return c.name == "root"; })) {
    checks.push_back({"root", "warn", root + " absent (created by the first lock taken; ls shows it empty)"});
    checks.push_back({"acl", "warn", "not checked: " + root + " absent"});
  }

  // 7. Detector leader: the first election candidate in creation order (the
  // detectors' own rule, model/election_order.hpp).
  try {
    const std::string dir(protocol::kElectionPath);
    auto cands = model::election_candidates(client->children(dir));
    for (auto i : model::election_czxids_needed(cands)) {
      if (const auto st = client->try_stat(join_path(dir, cands[i].name))) cands[i].czxid = st->czxid;
    }
    model::sort_election(cands);
    if (cands.empty()) {
      checks.push_back({"detector", "warn", "no zklock-detector running (no election nodes)"});
    } else {
      const auto& leader = cands.front().name;
      const auto data = client->try_get(join_path(dir, leader));
      checks.push_back({"detector", "ok", "leader " + (data && !data->empty() ? *data : leader) + " (" +
                                              std::to_string(cands.size()) + " replica" +
                                              (cands.size() == 1 ? ")" : "s)")});
    }
  } catch (const Error& e) {
    if (e.code() == Errc::no_node) checks.push_back({"detector", "warn", "no zklock-detector has ever run"});
    else checks.push_back({"detector", "fail", e.what()});
  }

  if (root_stat) {
    try {
      check_heads(*client, root, head_threshold, server_clock, checks);
    } catch (const Error& e) {
      checks.push_back({"lock heads", "fail", e.what()});
    }
  }

  // 9. Session stability, for this session over the checks above: a
  // connection lost is a warning, a reconnect loop (Client::
  // reconnect_loops_seen: connections closing before any answer for a
  // session timeout; docs/operations.md, "A reconnect loop") a failure.
  {
    const auto lived = std::chrono::duration_cast<milliseconds>(SteadyClock::now() - started);
    const auto loops = client->reconnect_loops_seen();
    const int lost = drops->load();
    Check c{"session stability", "ok", "no connection lost in " + humanize_age(lived)};
    if (loops > 0) {
      c.status = "fail";
      c.detail = std::to_string(loops) + " reconnect loop(s): connections kept closing before any answer for a "
                 "session timeout, and the session was ended (docs/operations.md, \"A reconnect loop\")";
    } else if (lost > 0) {
      c.status = "warn";
      c.detail = std::to_string(lost) + " connection(s) lost in " + humanize_age(lived) + " (the session survived)";
    }
    c.fields["connections_lost"] = lost;
    c.fields["reconnect_loops"] = loops;
    checks.push_back(std::move(c));
  }

  if (std::any_of(checks.begin(), checks.end(), [](const Check& c) { return c.status == "fail"; })) {
    exit_status = exit_code::failure;
  }
  return checks;
}

void run_doctor(Context& ctx, const DoctorOptions& o) {
  const auto& g = ctx.global;
  const auto head_threshold = parse_duration(o.head_threshold);  // a usage error before connecting
  int status = exit_code::ok;
  const auto checks = run_checks(g, head_threshold, status);
  if (g.json) {
    nlohmann::json j{{"zk", g.zk}, {"ok", status == exit_code::ok}, {"checks", nlohmann::json::array()}};
    for (const auto& c : checks) {
      nlohmann::json check{{"name", c.name}, {"status", c.status}, {"detail", c.detail}};
      check.update(c.fields);
      j["checks"].push_back(std::move(check));
    }
    std::cout << j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
  } else {
    Table t({"CHECK", "STATUS", "DETAIL"});
    for (const auto& c : checks) t.add_row({c.name, c.status, c.detail});
    std::cout << t.render();
  }
  ctx.exit_status = status;
}

}  // namespace

void set_doctor_command(CLI::App* app, Context& ctx) {
  auto opts = std::make_shared<DoctorOptions>();
  auto* sub = app->add_subcommand("doctor", "Check reachability, server version and mode, ensemble id, session timeout, "
                                            "root, permissions, the detector leader and lock heads that keep others "
                                            "waiting");
  sub->add_option("--head-threshold", opts->head_threshold,
                  "Report a lock whose head has had waiters behind it this long (\"head not taking the lock\"; "
                  "held or stuck)")
      ->capture_default_str();
  sub->callback([&ctx, opts] { run_doctor(ctx, *opts); });
}

}  // namespace zklock::cli
