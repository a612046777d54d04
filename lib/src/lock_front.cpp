// What the front ends share: a request's owner, a mutex's request, results to leases, the asynchronous start.
#include "lock_front.hpp"

#include <unistd.h>

#include <memory>
#include <optional>
#include <utility>

#include "zklock/protocol/node_data.hpp"

namespace zklock::detail {
namespace {

// The node's data, encoded once per thread for as long as the same owner
// asks with the same options: a service re-taking its lock would otherwise
// build and dump a JSON document (35 allocations) on every acquisition.
// encode_node_data is pure, so the memo returns exactly what it would.
std::string encode_memo(const protocol::NodeData& d) {
  struct Memo {
    protocol::NodeData in;
    std::string out;
  };
  thread_local std::optional<Memo> memo;
  const auto same = [&](const protocol::NodeData& m) {
    return m.pid == d.pid && m.mode == d.mode && m.priority == d.priority && m.owner == d.owner &&
           m.host == d.host && m.description == d.description && m.gives_up_after_ms == d.gives_up_after_ms;
  };
  if (!memo || !same(memo->in)) memo = Memo{d, protocol::encode_node_data(d)};  // throws before replacing
  return memo->out;
}

}  // namespace

std::string node_data_for(const Client::Impl& impl, const AttemptRequest& r, const std::string& owner) {
  protocol::NodeData d;
  d.owner = owner;
  d.host = impl.owner_prefix.substr(0, impl.owner_prefix.find('/'));
  d.pid = ::getpid();
  d.mode = r.mode;
  d.priority = r.options.priority;
  d.description = r.options.description;
  // Stated relative to the node's ctime, not as a deadline of our clock: the
  // timer (LockAttempt::start) starts before the create is sent, so ctime +
  // timeout is never before we give up, and the detector compares only the
  // server's clock with its own (docs/protocol.md, "Data"). Constant per
  // request options, so the memo still serves repeated acquisitions.
  if (r.timeout > std::chrono::milliseconds::zero()) d.gives_up_after_ms = r.timeout.count();
  return encode_memo(d);
}

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
