// What the front ends share: a request's owner, a mutex's request, results to leases, the asynchronous start.
#include "lock_front.hpp"

#include <memory>
#include <utility>

namespace zklock::detail {

std::string owner_for(const Client& client, const AcquireOptions& o) {
  return !o.owner.empty()                  ? o.owner
         : !OwnerScope::current().empty() ? OwnerScope::current()
                                          : client.default_owner();
}

Holder holder_for(const Client& client, const AttemptRequest& r) {
  return Holder{owner_for(client, r.options), r.options.priority, r.options.description, r.policy};
}

AttemptRequest mutex_request(const std::string& lock_path, Mode mode, const AcquireOptions& options,
                             const MutexOptions& mutex, const std::shared_ptr<RetainSlot>& slot,
                             std::chrono::milliseconds timeout, std::stop_token stop) {
  AttemptRequest r;
  r.lock_path = lock_path;
  r.mode = mode;
  r.options = options;
  r.policy = mutex.loss_policy;
  r.timeout = timeout;
  r.stop = std::move(stop);
  r.retain = mutex.retain;  // LockAttempt::start clears it for a reader
  r.slot = slot;
  return r;
}

Lease take_lease(AcquireResult result) {
  if (result.error) throw std::move(*result.error);
  return std::move(result.lease);
}

std::optional<Lease> take_lease_unless_timeout(AcquireResult result) {
  if (result.error && result.error->code() == Errc::timeout) return std::nullopt;
  return take_lease(std::move(result));
}

void start_async(Client& client, AttemptRequest request, AcquireCallback done) {
  auto impl = ClientAccess::impl(client);
  LockAttempt::start_observed(client, std::move(request), [impl, done = std::move(done)](AcquireResult r) mutable {
    auto shared = std::make_shared<AcquireResult>(std::move(r));
    impl->post_user([done, shared]() mutable { done(std::move(*shared)); });
  });
}

}  // namespace zklock::detail
