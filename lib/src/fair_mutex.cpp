// FairMutex: the exclusive front of the one recipe core (lock_attempt.hpp).
#include "zklock/fair_mutex.hpp"

#include "lock_front.hpp"
#include "try_timeout.hpp"
#include "zklock/path.hpp"

namespace zklock {

FairMutex::FairMutex(Client& client, std::string lock_path, MutexOptions options)
    : client_(&client),
      path_(std::move(lock_path)),
      options_(options),
      retained_(std::make_shared<detail::RetainSlot>()) {
  validate_lock_path(path_);
}

detail::AttemptRequest FairMutex::make_request(const AcquireOptions& o) const {
  return detail::mutex_request(path_, Mode::exclusive, o, options_, retained_);
}

Lease FairMutex::acquire(const AcquireOptions& options) {
  return detail::take_lease(
      detail::LockAttempt::run_blocking(*client_, make_request(options)));
}

Lease FairMutex::acquire(std::stop_token stop, const AcquireOptions& options) {
  auto req = make_request(options);
  req.stop = std::move(stop);
  return detail::take_lease(detail::LockAttempt::run_blocking(*client_, std::move(req)));
}

std::optional<Lease> FairMutex::try_acquire_for(std::chrono::milliseconds timeout, const AcquireOptions& options) {
  auto req = make_request(options);
  req.timeout = detail::try_timeout(timeout);
  return detail::take_lease_unless_timeout(detail::LockAttempt::run_blocking(*client_, std::move(req)));
}

void FairMutex::acquire_async(AcquireCallback done, const AcquireOptions& options, std::chrono::milliseconds timeout,
                              std::stop_token stop) {
  auto req = make_request(options);
  req.timeout = timeout;
  req.stop = std::move(stop);
  detail::start_async(*client_, std::move(req), std::move(done));
}

}  // namespace zklock
