// Lease and OwnerScope: a granted lock's handle over its attempt, and the thread's default owner.
#include "zklock/lease.hpp"

#include <tuple>

#include "lock_attempt.hpp"
#include "zklock/options.hpp"

namespace zklock {

std::string_view loss_reason_name(LossReason r) noexcept {
  switch (r) {
    case LossReason::session_expired: return "session_expired";
    case LossReason::validity_expired: return "validity_expired";
    case LossReason::revoked: return "revoked";
    case LossReason::disconnected: return "disconnected";
  }
  return "unknown";
}

namespace {
const FencingToken kNoToken;
const std::string kEmpty;
thread_local std::string tl_owner;
}  // namespace

Lease::Lease(std::shared_ptr<detail::LockAttempt> attempt) : attempt_(std::move(attempt)) {
  if (attempt_) std::tie(grant_, token_) = attempt_->current_grant();
}

Lease& Lease::operator=(Lease&& other) noexcept {
  if (this != &other) {
    release();
    attempt_ = std::move(other.attempt_);
    grant_ = other.grant_;
    token_ = std::move(other.token_);
  }
  return *this;
}

Lease::~Lease() { release(); }

const FencingToken& Lease::token() const { return attempt_ ? token_ : kNoToken; }
bool Lease::valid() const { return attempt_ && attempt_->valid(grant_); }
bool Lease::suspended() const { return attempt_ && attempt_->suspended(grant_); }
std::optional<LossReason> Lease::loss_reason() const {
  return attempt_ ? attempt_->loss_reason(grant_) : std::nullopt;
}
std::string Lease::loss_detail() const { return attempt_ ? attempt_->loss_detail(grant_) : std::string(); }
void Lease::on_lost(std::function<void(LossReason, const std::string&)> cb) {
  if (attempt_) attempt_->on_lost(grant_, std::move(cb));
}
std::stop_token Lease::lost_token() const { return attempt_ ? attempt_->lost_token(grant_) : std::stop_token(); }
void Lease::release() noexcept {
  if (attempt_) attempt_->release(grant_);
}
void Lease::release_async(std::function<void()> done) noexcept {
  if (attempt_) {
    attempt_->release_async(grant_, std::move(done));
  } else if (done) {
    try {
      done();  // nothing to release, and no client to post to
    } catch (...) {
    }
  }
}
const std::string& Lease::lock_path() const { return attempt_ ? attempt_->lock_path() : kEmpty; }
const std::string& Lease::node_path() const { return attempt_ ? attempt_->node_path() : kEmpty; }
const std::string& Lease::owner() const { return attempt_ ? attempt_->owner() : kEmpty; }
Mode Lease::mode() const { return attempt_ ? attempt_->mode() : Mode::exclusive; }

OwnerScope::OwnerScope(std::string owner) : previous_(std::move(tl_owner)) { tl_owner = std::move(owner); }
OwnerScope::~OwnerScope() { tl_owner = std::move(previous_); }
const std::string& OwnerScope::current() noexcept { return tl_owner; }

}  // namespace zklock
