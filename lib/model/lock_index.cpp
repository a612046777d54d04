#include "model/lock_index.hpp"

namespace zklock::model {

namespace {

// Only node data whose owner hashes to the key in the node's name names the
// key's owner (the rule analyze_queues() applies).
bool names_owner(const QueueNode& n) { return model::names_owner(n.owner, n.owner_key); }

}  // namespace

void LockIndex::mark_lone(const std::string& lock, const Queue& q, bool lone) {
  // REQUIRES: q.size() == 1 (the queue is becoming, or stops being, lone).
  auto& key = keys_[q.begin()->second.owner_key];
  if (lone) {
    key.lone.insert(lock);
  } else {
    key.lone.erase(lock);
  }
}

void LockIndex::count_owner(const QueueNode& n, int delta) {
  if (!names_owner(n)) return;
  auto& owners = keys_[n.owner_key].owners;
  if (delta > 0) {
    ++owners[n.owner];
  } else if (auto it = owners.find(n.owner); it != owners.end() && --it->second == 0) {
    owners.erase(it);
  }
}

bool LockIndex::insert(const std::string& lock, QueueNode node) {
  auto& q = queues_[lock];
  if (q.count(node.name)) return false;
  if (q.size() == 1) {
    mark_lone(lock, q, false);
    contended_.emplace(lock, &q);
  }
  ++keys_[node.owner_key].nodes;
  count_owner(node, +1);
  auto name = node.name;
  q.emplace(std::move(name), std::move(node));
  if (q.size() == 1) mark_lone(lock, q, true);
  ++nodes_;
  return true;
}

void LockIndex::set_read(const std::string& lock, const std::string& name, std::int64_t czxid, std::int64_t ctime_ms,
                         std::string owner, int priority, std::int64_t gives_up_after_ms) {
  auto qit = queues_.find(lock);
  if (qit == queues_.end()) return;
  auto nit = qit->second.find(name);
  if (nit == qit->second.end()) return;
  auto& n = nit->second;
  count_owner(n, -1);
  n.czxid = czxid;
  n.ctime_ms = ctime_ms;
  n.owner = std::move(owner);
  n.priority = priority;
  n.gives_up_after_ms = gives_up_after_ms;
  count_owner(n, +1);
}

void LockIndex::erase(const std::string& lock, const std::string& name) {
  auto qit = queues_.find(lock);
  if (qit == queues_.end()) return;
  auto& q = qit->second;
  auto nit = q.find(name);
  if (nit == q.end()) return;
  if (q.size() == 1) mark_lone(lock, q, false);
  count_owner(nit->second, -1);
  const auto key = nit->second.owner_key;
  q.erase(nit);
  --nodes_;
  if (auto kit = keys_.find(key); kit != keys_.end() && --kit->second.nodes == 0) keys_.erase(kit);
  if (q.size() == 1) {
    contended_.erase(lock);
    mark_lone(lock, q, true);
  } else if (q.empty()) {
    queues_.erase(qit);
  }
}

QueueSnapshot LockIndex::snapshot() const {
  QueueSnapshot out;
  out.contended.reserve(contended_.size());
  for (const auto& [lock, queue] : contended_) {
    const auto& q = *queue;
    LockQueue lq{lock, {}};
    lq.nodes.reserve(q.size());
    for (const auto& [name, n] : q) {
      lq.nodes.push_back(n);
      auto [slot, fresh] = out.keys.try_emplace(n.owner_key);
      if (!fresh) continue;
      const auto& key = keys_.at(n.owner_key);
      slot->second = KeyFacts{key.owners.empty() ? std::string() : key.owners.begin()->first, key.lone.size()};
    }
    out.contended.push_back(std::move(lq));
  }
  out.lone_queues = queues_.size() - contended_.size();
  return out;
}

std::vector<LoneNode> LockIndex::lone_nodes(const std::string& owner_key) const {
  std::vector<LoneNode> out;
  auto kit = keys_.find(owner_key);
  if (kit == keys_.end()) return out;
  for (const auto& lock : kit->second.lone) {
    const auto& n = queues_.at(lock).begin()->second;
    out.push_back({node_path(lock, n.name), n.czxid});
  }
  return out;
}

std::vector<LockQueue> LockIndex::queues() const {
  std::vector<LockQueue> out;
  out.reserve(queues_.size());
  for (const auto& [lock, q] : queues_) {
    LockQueue lq{lock, {}};
    for (const auto& [name, n] : q) lq.nodes.push_back(n);
    out.push_back(std::move(lq));
  }
  return out;
}

}  // namespace zklock::model
