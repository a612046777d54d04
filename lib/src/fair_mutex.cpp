#include "zklock/fair_mutex.hpp"

#include "lock_attempt.hpp"

namespace zklock {

FairMutex::FairMutex(Client& client, std::string lock_path, MutexOptions options)
    : client_(&client), path_(std::move(lock_path)), options_(options) {
  validate_lock_path(path_);
}

namespace {
detail::AttemptRequest make_request(const std::string& path, Mode mode, const AcquireOptions& o, LossPolicy p) {
  detail::AttemptRequest r;
  r.lock_path = path;
  r.mode = mode;
  r.options = o;
  r.policy = p;
  return r;
}

Lease take(AcquireResult r) {
  if (r.error) throw std::move(*r.error);
  return std::move(r.lease);
}
}  // namespace

Lease FairMutex::acquire(const AcquireOptions& options) {
  return take(detail::LockAttempt::run_blocking(*client_, make_request(path_, Mode::exclusive, options, options_.loss_policy)));
}

Lease FairMutex::acquire(std::stop_token stop, const AcquireOptions& options) {
  auto req = make_request(path_, Mode::exclusive, options, options_.loss_policy);
  req.stop = std::move(stop);
  return take(detail::LockAttempt::run_blocking(*client_, std::move(req)));
}

std::optional<Lease> FairMutex::try_acquire_for(std::chrono::milliseconds timeout, const AcquireOptions& options) {
  auto req = make_request(path_, Mode::exclusive, options, options_.loss_policy);
  req.timeout = std::max(timeout, std::chrono::milliseconds(1));
  auto r = detail::LockAttempt::run_blocking(*client_, std::move(req));
  if (r.error && r.error->code() == Errc::timeout) return std::nullopt;
  return take(std::move(r));
}

void FairMutex::acquire_async(AcquireCallback done, const AcquireOptions& options, std::chrono::milliseconds timeout,
                              std::stop_token stop) {
  auto req = make_request(path_, Mode::exclusive, options, options_.loss_policy);
  req.timeout = timeout;
  req.stop = std::move(stop);
  auto impl = client_->impl();
  detail::LockAttempt::start(*client_, std::move(req), [impl, done = std::move(done)](AcquireResult r) mutable {
    auto shared = std::make_shared<AcquireResult>(std::move(r));
    impl->post_user([done, shared]() mutable { done(std::move(*shared)); });
  });
}

}  // namespace zklock
