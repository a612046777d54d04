// FairSharedMutex: the read-write front of the one recipe core (the machine decides by node mode).
#include "zklock/shared_mutex.hpp"

#include "lock_front.hpp"
#include "try_timeout.hpp"
#include "zklock/path.hpp"

namespace zklock {

using detail::take_lease;
using detail::take_lease_unless_timeout;

FairSharedMutex::FairSharedMutex(Client& client, std::string lock_path, MutexOptions options)
    : client_(&client),
      path_(std::move(lock_path)),
      options_(options),
      retained_(std::make_shared<detail::RetainSlot>()) {
  validate_lock_path(path_);
}

AcquireResult FairSharedMutex::run(Mode mode, std::stop_token stop, std::chrono::milliseconds timeout,
                                   const AcquireOptions& options) {
  return detail::LockAttempt::run_blocking(
      *client_, detail::mutex_request(path_, mode, options, options_, retained_, timeout, std::move(stop)));
}

void FairSharedMutex::start(Mode mode, AcquireCallback done, const AcquireOptions& options,
                            std::chrono::milliseconds timeout, std::stop_token stop) {
  detail::start_async(*client_, detail::mutex_request(path_, mode, options, options_, retained_, timeout, std::move(stop)),
                      std::move(done));
}

Lease FairSharedMutex::acquire(const AcquireOptions& options) {
  return take_lease(run(Mode::exclusive, {}, {}, options));
}
Lease FairSharedMutex::acquire(std::stop_token stop, const AcquireOptions& options) {
  return take_lease(run(Mode::exclusive, std::move(stop), {}, options));
}
std::optional<Lease> FairSharedMutex::try_acquire_for(std::chrono::milliseconds timeout,
                                                      const AcquireOptions& options) {
  return take_lease_unless_timeout(run(Mode::exclusive, {}, detail::try_timeout(timeout), options));
}
void FairSharedMutex::acquire_async(AcquireCallback done, const AcquireOptions& options,
                                    std::chrono::milliseconds timeout, std::stop_token stop) {
  start(Mode::exclusive, std::move(done), options, timeout, std::move(stop));
}

Lease FairSharedMutex::acquire_shared(const AcquireOptions& options) {
  return take_lease(run(Mode::shared, {}, {}, options));
}
Lease FairSharedMutex::acquire_shared(std::stop_token stop, const AcquireOptions& options) {
  return take_lease(run(Mode::shared, std::move(stop), {}, options));
}
std::optional<Lease> FairSharedMutex::try_acquire_shared_for(std::chrono::milliseconds timeout,
                                                             const AcquireOptions& options) {
  return take_lease_unless_timeout(run(Mode::shared, {}, detail::try_timeout(timeout), options));
}
void FairSharedMutex::acquire_shared_async(AcquireCallback done, const AcquireOptions& options,
                                           std::chrono::milliseconds timeout, std::stop_token stop) {
  start(Mode::shared, std::move(done), options, timeout, std::move(stop));
}

}  // namespace zklock
