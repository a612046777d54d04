// Revocation: the record's JSON codec, and the checked multi that deletes a node with its record.
#include "zklock/protocol/revoke.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <future>
#include <memory>
#include <mutex>
#include <set>

#include <nlohmann/json.hpp>

#include "json_int.hpp"
#include "zklock/error.hpp"
#include "zklock/path.hpp"
#include "zklock/protocol/node_name.hpp"

namespace zklock::protocol {
namespace {

std::int64_t wall_now_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

// The index of the operation that failed a multi: the first result that is
// neither ok nor the "rolled back after an earlier failure" code.
std::optional<std::size_t> failing_op(const std::vector<OpResult>& results) {
  for (std::size_t i = 0; i < results.size(); ++i) {
    const auto& s = results[i].status;
    if (!s.ok() && !s.is(Errc::runtime_inconsistency)) return i;
  }
  return std::nullopt;
}

std::string last_component(std::string_view path) {
  const auto slash = path.rfind('/');
  return std::string(slash == std::string_view::npos ? path : path.substr(slash + 1));
}

}  // namespace

std::string encode_revocation_record(const RevocationRecord& r) {
  nlohmann::json cycle = nlohmann::json::array();
  for (const auto& e : r.cycle) cycle.push_back({{"owner", e.owner}, {"lock", e.lock}, {"node", e.node}});
  nlohmann::json j = {{"version", r.version},
                      {"victim_node", r.victim_node},
                      {"victim_owner", r.victim_owner},
                      {"victim_token", r.victim_token},
                      {"cycle", std::move(cycle)},
                      {"policy", r.policy},
                      {"mode", r.mode},
                      {"detector", r.detector},
                      {"time", r.time_ms}};
  if (!r.reason.empty()) j["reason"] = r.reason;
  auto out = j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
  if (out.size() > kMaxRevocationRecordBytes) {
    throw Error(Errc::invalid_argument, "revocation record for " + r.victim_node + " exceeds " +
                                            std::to_string(kMaxRevocationRecordBytes) + " bytes");
  }
  return out;
}

std::optional<RevocationRecord> decode_revocation_record(std::string_view bytes) noexcept {
  if (bytes.empty() || bytes.size() > kMaxRevocationRecordBytes) return std::nullopt;
  try {
    const auto j = nlohmann::json::parse(bytes);
    if (!j.is_object()) return std::nullopt;
    RevocationRecord r;
    std::int64_t version = 1, time_ms = 0;
    if (!detail::read_int_field(j, "version", INT32_MIN, INT32_MAX, version) ||
        !detail::read_int_field(j, "time", 0, INT64_MAX, time_ms)) {
      return std::nullopt;
    }
    r.version = static_cast<int>(version);
    r.victim_node = j.at("victim_node").get<std::string>();
    if (r.victim_node.empty()) return std::nullopt;
    r.victim_owner = j.value("victim_owner", "");
    r.victim_token = j.value("victim_token", "");
    r.policy = j.value("policy", "");
    r.mode = j.value("mode", "");
    r.detector = j.value("detector", "");
    r.time_ms = time_ms;
    r.reason = j.value("reason", "");
    if (j.contains("cycle")) {
      const auto& c = j.at("cycle");
      if (!c.is_array()) return std::nullopt;
      for (const auto& e : c) {
        r.cycle.push_back({e.at("owner").get<std::string>(), e.at("lock").get<std::string>(),
                           e.at("node").get<std::string>()});
      }
    }
    return r;
  } catch (...) {
    return std::nullopt;
  }
}

std::string cycle_text(const RevocationRecord& record) {
  if (record.cycle.empty()) return {};
  std::string out = record.cycle.front().owner;
  for (std::size_t i = 0; i < record.cycle.size(); ++i) {
    out += " -[" + record.cycle[i].lock + "]-> ";
    out += record.cycle[(i + 1) % record.cycle.size()].owner;
  }
  return out;
}

std::string revocation_message(const RevocationRecord& record) {
  std::string out = "lock node " + record.victim_node + " was revoked";
  if (record.cycle.empty()) {
    out += " by " + (record.detector.empty() ? std::string("an operator") : record.detector);
    if (!record.reason.empty()) out += ": " + record.reason;
    return out;
  }
  out += " by deadlock detector " + record.detector + " (policy " + record.policy + ", mode " +
         record.mode + ") to break the cycle " + cycle_text(record);
  if (!record.reason.empty()) out += ": " + record.reason;
  return out;
}

std::string revocation_record_path(std::string_view node_path_or_name) {
  return join_path(kRevocationsPath, last_component(node_path_or_name));
}

std::string_view revoke_outcome_name(RevokeOutcome o) noexcept {
  switch (o) {
    case RevokeOutcome::revoked: return "revoked";
    case RevokeOutcome::aborted: return "aborted";
    case RevokeOutcome::deposed: return "deposed";
    case RevokeOutcome::failed: return "failed";
  }
  return "failed";
}

std::vector<Op> revocation_ops(const RevocationRequest& request, std::string_view ensemble_id) {
  std::vector<Op> ops;
  if (request.leader_node) ops.push_back(Op::check(*request.leader_node));
  std::set<std::string> checked;
  for (const auto& path : request.checks) {
    if (checked.insert(path).second) ops.push_back(Op::check(path));
  }
  const auto now = request.record.time_ms ? request.record.time_ms : wall_now_ms();
  for (const auto& v : request.victims) {
    RevocationRecord r = request.record;
    r.victim_node = v.node;
    r.victim_owner = v.owner;
    r.victim_token = (v.token_zxid != 0 && !ensemble_id.empty())
                         ? std::string(ensemble_id) + ":" + std::to_string(v.token_zxid)
                         : std::string();
    r.time_ms = now;
    ops.push_back(Op::create(revocation_record_path(v.node), encode_revocation_record(r)));
  }
  for (const auto& v : request.victims) ops.push_back(Op::remove(v.node, v.version));
  return ops;
}

RevokeResult interpret_revocation(const RevocationRequest& request, Status status,
                                  const std::vector<OpResult>& results) {
  RevokeResult out;
  out.status = status;
  if (status.ok()) {
    out.outcome = RevokeOutcome::revoked;
    for (const auto& v : request.victims) out.records.push_back(revocation_record_path(v.node));
    return out;
  }
  // Rebuild the op layout (without data) to name the failing operation.
  const std::size_t leader = request.leader_node ? 1 : 0;
  const std::size_t checks = leader + std::set<std::string>(request.checks.begin(), request.checks.end()).size();
  const std::size_t creates = checks + request.victims.size();
  const auto idx = failing_op(results);
  if (!idx) {
    // No per-operation results (connection loss, auth failure...).
    out.outcome = RevokeOutcome::failed;
    out.detail = "multi failed: " + std::string(errc_name(status.code()));
    return out;
  }
  const auto code = results[*idx].status;
  out.status = code;
  if (*idx < leader) {
    out.outcome = code.is(Errc::no_node) ? RevokeOutcome::deposed : RevokeOutcome::failed;
    out.detail = "leader node " + *request.leader_node + ": " + std::string(errc_name(code.code()));
  } else if (*idx < checks) {
    out.outcome = code.is(Errc::no_node) ? RevokeOutcome::aborted : RevokeOutcome::failed;
    out.detail = "check of a cycle node: " + std::string(errc_name(code.code()));
  } else if (*idx < creates) {
    // node_exists: the node was already revoked by someone else.
    out.outcome = code.is(Errc::node_exists) ? RevokeOutcome::aborted : RevokeOutcome::failed;
    out.detail = "create of record " + revocation_record_path(request.victims[*idx - checks].node) + ": " +
                 std::string(errc_name(code.code()));
  } else {
    // bad_version: the victim node changed since its stat was read (zklock
    // never rewrites a lock node, so someone else did).
    out.outcome = code.is(Errc::no_node) || code.is(Errc::bad_version) ? RevokeOutcome::aborted : RevokeOutcome::failed;
    out.detail = "delete of " + request.victims[*idx - creates].node + ": " + std::string(errc_name(code.code()));
  }
  return out;
}

namespace {

// Shared state of one asynchronous revocation.
struct RevokeCall : std::enable_shared_from_this<RevokeCall> {
  Client& client;
  RevocationRequest request;
  std::function<void(RevokeResult)> done;
  std::string ensemble;
  bool retried = false;

  RevokeCall(Client& c, RevocationRequest r, std::function<void(RevokeResult)> d)
      : client(c), request(std::move(r)), done(std::move(d)) {}

  // Each victim's token and version, read just before the multi (pipelined;
  // answers arrive in order on the completion thread). A failed read keeps
  // the caller's values: a gone victim fails the multi anyway.
  void read_victims() {
    if (request.victims.empty()) {
      run_multi();
      return;
    }
    auto remaining = std::make_shared<std::atomic<std::size_t>>(request.victims.size());
    for (std::size_t i = 0; i < request.victims.size(); ++i) {
      client.stat_async(request.victims[i].node, nullptr,
                        [self = shared_from_this(), remaining, i](Status s, const Stat& st) {
                          if (s.ok()) {
                            self->request.victims[i].token_zxid = st.czxid;
                            self->request.victims[i].version = st.version;
                          }
                          if (remaining->fetch_sub(1) == 1) self->run_multi();
                        });
    }
  }

  void run_multi() {
    std::vector<Op> ops;
    try {
      ops = revocation_ops(request, ensemble);
    } catch (const Error& e) {
      RevokeResult r;
      r.detail = e.what();
      done(std::move(r));
      return;
    }
    client.multi_async(std::move(ops), [self = shared_from_this()](Status s, std::vector<OpResult> results) {
      self->on_multi(s, results);
    });
  }

  void on_multi(Status s, const std::vector<OpResult>& results) {
    auto result = interpret_revocation(request, s, results);
    const bool parent_missing = result.outcome == RevokeOutcome::failed && result.status.is(Errc::no_node) &&
                                result.detail.starts_with("create of record");
    if (parent_missing && !retried) {
      retried = true;
      create_parent(std::string(protocol::kMetadataRoot), [self = shared_from_this()] {
        self->create_parent(std::string(kRevocationsPath), [self] { self->run_multi(); });
      });
      return;
    }
    done(std::move(result));
  }

  void create_parent(std::string path, std::function<void()> next) {
    client.create_async(std::move(path), "", CreateMode::persistent,
                        [self = shared_from_this(), next = std::move(next)](Status s, const std::string&, const Stat&) {
                          if (s.ok() || s.is(Errc::node_exists)) {
                            next();
                            return;
                          }
                          RevokeResult r;
                          r.status = s;
                          r.detail = "creating the records' parent: " + std::string(errc_name(s.code()));
                          self->done(std::move(r));
                        });
  }
};

}  // namespace

void revoke_async(Client& client, RevocationRequest request, std::function<void(RevokeResult)> done) {
  auto call = std::make_shared<RevokeCall>(client, std::move(request), std::move(done));
  client.ensemble_id_async([call](Status s, const std::string& id) {
    // Without the ensemble id the records carry no token; the revocation
    // itself matters more than the token in its record.
    if (s.ok()) call->ensemble = id;
    call->read_victims();
  });
}

RevokeResult revoke(Client& client, const RevocationRequest& request, std::chrono::milliseconds timeout) {
  auto promise = std::make_shared<std::promise<RevokeResult>>();
  auto future = promise->get_future();
  revoke_async(client, request, [promise](RevokeResult r) { promise->set_value(std::move(r)); });
  if (future.wait_for(timeout) != std::future_status::ready) {
    RevokeResult r;
    r.status = Status{};
    r.detail = "no answer within " + std::to_string(timeout.count()) + " ms (outcome unknown)";
    return r;
  }
  return future.get();
}

std::optional<RevocationRecord> read_revocation_record(Client& client, std::string_view node_path) {
  try {
    auto data = client.try_get(revocation_record_path(node_path));
    if (!data) return std::nullopt;
    return decode_revocation_record(*data);
  } catch (const Error& e) {
    if (e.code() == Errc::no_auth) return std::nullopt;
    throw;
  }
}

std::size_t prune_revocation_records(Client& client, std::size_t keep) {
  const auto listed = client.try_children(std::string(kRevocationsPath));
  if (!listed) return 0;
  const auto& names = *listed;
  if (names.size() <= keep) return 0;
  std::vector<std::pair<std::int64_t, std::string>> by_age;
  for (const auto& n : names) {
    const auto path = join_path(kRevocationsPath, n);
    if (auto st = client.try_stat(path)) by_age.emplace_back(st->czxid, path);
  }
  if (by_age.size() <= keep) return 0;
  std::sort(by_age.begin(), by_age.end());
  by_age.resize(by_age.size() - keep);

  struct Latch {
    std::mutex mu;
    std::condition_variable cv;
    std::size_t pending = 0, deleted = 0;
  };
  auto latch = std::make_shared<Latch>();
  latch->pending = by_age.size();
  for (const auto& [czxid, path] : by_age) {
    client.remove_async(path, -1, [latch](Status s) {
      std::lock_guard lock(latch->mu);
      if (s.ok()) ++latch->deleted;
      if (--latch->pending == 0) latch->cv.notify_all();
    });
  }
  std::unique_lock lock(latch->mu);
  latch->cv.wait_for(lock, std::chrono::seconds(30), [&] { return latch->pending == 0; });
  return latch->deleted;
}

}  // namespace zklock::protocol
