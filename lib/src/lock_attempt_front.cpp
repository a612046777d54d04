// Who a request acts for (its owner and holder), and what each lock was last seen as (the per-client history).
#include <memory>
#include <utility>

#include "attempt_tables.hpp"
#include "lock_attempt.hpp"

namespace zklock::detail {

LockHistory seen_before(Client::Impl* impl, const std::string& lock_path) {
  auto& t = *impl->attempt_tables;
  std::lock_guard lk(t.mu);
  const auto it = t.seen.find(lock_path);
  return it == t.seen.end() ? LockHistory::unknown : it->second ? LockHistory::contended : LockHistory::free;
}

void remember_seen(Client::Impl* impl, const std::string& lock_path, bool contended) {
  auto& t = *impl->attempt_tables;
  std::lock_guard lk(t.mu);
  if (t.seen.size() >= 4096) t.seen.clear();
  t.seen[lock_path] = contended;
}

// The owner a request acts for: its own, else the thread's OwnerScope, else
// the client's default.
std::string owner_for(const Client& client, const AcquireOptions& o) {
  return !o.owner.empty()                  ? o.owner
         : !OwnerScope::current().empty() ? OwnerScope::current()
                                          : client.default_owner();
}

Holder holder_for(const Client& client, const AttemptRequest& r) {
  return Holder{owner_for(client, r.options), r.options.priority, r.options.description, r.policy};
}

}  // namespace zklock::detail
