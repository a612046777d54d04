#include "model/lock_index.hpp"

#include <algorithm>

namespace zklock::model {

QueueNode LockIndex::Slot::node() const {
  QueueNode n;
  n.name = name;
  n.mode = mode;
  n.owner_key = std::string(key());
  n.sequence = sequence;
  n.owner = owner;
  n.priority = priority;
  n.czxid = czxid;
  n.ctime_ms = ctime_ms;
  n.gives_up_after_ms = gives_up_after_ms;
  return n;
}

LockIndex::Queue::iterator LockIndex::find(Queue& q, std::string_view name) {
  return std::find_if(q.begin(), q.end(), [&](const Slot& s) { return s.name == name; });
}

void LockIndex::mark_lone(const std::string& lock, const Queue& q, bool lone) {
  // REQUIRES: q.size() == 1 (the queue is becoming, or stops being, lone);
  // `lock` is q's key in queues_ (the view must outlive the entry).
  auto& key = keys_.find(q.front().key())->second;
  if (lone) {
    key.lone.insert(std::string_view(lock));
  } else {
    key.lone.erase(std::string_view(lock));
  }
}

void LockIndex::count_owner(const Slot& n, int delta) {
  // Only node data whose owner hashes to the key in the node's name names
  // the key's owner (the rule analyze_queues() applies).
  if (!names_owner(n.owner, n.key())) return;
  auto& owners = keys_.find(n.key())->second.owners;
  auto it = std::lower_bound(owners.begin(), owners.end(), n.owner,
                             [](const auto& e, const std::string& o) { return e.first < o; });
  const bool found = it != owners.end() && it->first == n.owner;
  if (delta > 0) {
    if (found) {
      ++it->second;
    } else {
      owners.insert(it, {n.owner, 1});
    }
  } else if (found && --it->second == 0) {
    owners.erase(it);
  }
}

bool LockIndex::insert(const std::string& lock, QueueNode node) {
  auto qit = queues_.try_emplace(lock).first;
  auto& q = qit->second;
  if (find(q, node.name) != q.end()) return false;
  const auto at = node.name.find(node.owner_key);
  if (at == std::string::npos || at > 255 || node.owner_key.size() > 255) return false;  // see insert()
  Slot s;
  s.key_at = static_cast<std::uint8_t>(at);
  s.key_len = static_cast<std::uint8_t>(node.owner_key.size());
  s.name = std::move(node.name);
  s.owner = std::move(node.owner);
  s.czxid = node.czxid;
  s.ctime_ms = node.ctime_ms;
  s.gives_up_after_ms = node.gives_up_after_ms;
  s.sequence = node.sequence;
  s.priority = node.priority;
  s.mode = node.mode;
  if (q.size() == 1) {
    mark_lone(qit->first, q, false);
    contended_.emplace(qit->first, &q);
  }
  auto kit = keys_.find(s.key());
  if (kit == keys_.end()) kit = keys_.emplace(std::string(s.key()), KeyState{}).first;
  ++kit->second.nodes;
  q.push_back(std::move(s));
  count_owner(q.back(), +1);
  if (q.size() == 1) mark_lone(qit->first, q, true);
  ++nodes_;
  return true;
}

void LockIndex::set_read(const std::string& lock, const std::string& name, std::int64_t czxid, std::int64_t ctime_ms,
                         std::string owner, int priority, std::int64_t gives_up_after_ms) {
  auto qit = queues_.find(lock);
  if (qit == queues_.end()) return;
  auto nit = find(qit->second, name);
  if (nit == qit->second.end()) return;
  auto& n = *nit;
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
  auto nit = find(q, name);
  if (nit == q.end()) return;
  if (q.size() == 1) mark_lone(qit->first, q, false);
  count_owner(*nit, -1);
  if (auto kit = keys_.find(nit->key()); kit != keys_.end() && --kit->second.nodes == 0) keys_.erase(kit);
  if (nit != q.end() - 1) *nit = std::move(q.back());
  q.pop_back();
  --nodes_;
  if (q.size() == 1) {
    contended_.erase(std::string_view(qit->first));
    mark_lone(qit->first, q, true);
  } else if (q.empty()) {
    queues_.erase(qit);
  } else if (q.capacity() > 2 * q.size() + 4) {
    q.shrink_to_fit();  // a hot queue that drained gives its memory back
  }
}

QueueSnapshot LockIndex::snapshot() const {
  QueueSnapshot out;
  out.contended.reserve(contended_.size());
  for (const auto& [lock, queue] : contended_) {
    LockQueue lq{std::string(lock), {}};
    lq.nodes.reserve(queue->size());
    for (const auto& slot : *queue) {
      lq.nodes.push_back(slot.node());
      auto [it, fresh] = out.keys.try_emplace(lq.nodes.back().owner_key);
      if (!fresh) continue;
      const auto& key = keys_.find(slot.key())->second;
      it->second = KeyFacts{key.owners.empty() ? std::string() : key.owners.front().first, key.lone.size()};
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
  for (const auto lock : kit->second.lone) {
    const auto qit = queues_.find(lock);
    out.push_back({node_path(qit->first, qit->second.front().name), qit->second.front().czxid});
  }
  return out;
}

std::vector<LockQueue> LockIndex::queues() const {
  std::vector<LockQueue> out;
  out.reserve(queues_.size());
  for (const auto& [lock, q] : queues_) {
    LockQueue lq{lock, {}};
    for (const auto& slot : q) lq.nodes.push_back(slot.node());
    out.push_back(std::move(lq));
  }
  return out;
}

}  // namespace zklock::model
