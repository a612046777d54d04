// The sessions behind one Client: seating lock attempts under the watch budget, opening more sessions.
#include "session_pool.hpp"

namespace zklock::detail {
namespace {

// The longest child name zklock gives a lock node: its prefix (mode, key,
// GUID) and the server's ten-digit sequence number. Generous on purpose.
constexpr std::size_t kNodeNameBytes = 80;
// A SetWatches entry: the length, then the bytes.
constexpr std::size_t kEntryHeader = 4;

std::size_t chroot_bytes(const ClientOptions& o) {
  const auto slash = o.connect.find('/');
  return slash == std::string::npos ? 0 : o.connect.size() - slash;
}

}  // namespace

std::size_t attempt_watch_bytes(const ClientOptions& options, std::string_view lock_path) {
  const std::size_t dir = kEntryHeader + chroot_bytes(options) + lock_path.size();
  const std::size_t node = dir + 1 + kNodeNameBytes;
  return dir + 2 * node;  // the children of the lock, our node, the node ahead
}

Seat SessionShards::seat(const std::shared_ptr<Client::Impl>& primary, std::size_t bytes) {
  if (primary->try_seat(bytes)) return Seat(primary, bytes);
  std::lock_guard lk(mu_);
  for (const auto& s : shards_) {
    if (s->try_seat(bytes)) return Seat(s, bytes);
  }
  if (closed_) throw Error(Errc::closing, "the client is closing");
  const auto index = static_cast<std::uint32_t>(shards_.size() + 1);
  auto shard = std::make_shared<Client::Impl>(*primary, index);
  shard->start();  // throws connect_timeout; the shard closes itself then
  primary->log->info("zookeeper session 0x{:x} opened beside 0x{:x}: lock attempts under way watch more than "
                     "one session's budget of {} bytes (ClientOptions::watch_budget_bytes); {} sessions now",
                     shard->session_id(), primary->session_id(), primary->opts.watch_budget_bytes,
                     shards_.size() + 2);
  shards_.push_back(shard);
  // A fresh session takes any one attempt, even one larger than the budget (invariant 1).
  shard->seat_unchecked(bytes);
  return Seat(shard, bytes);
}

std::vector<std::shared_ptr<Client::Impl>> SessionShards::all() const {
  std::lock_guard lk(mu_);
  return shards_;
}

void SessionShards::shutdown() {
  std::vector<std::shared_ptr<Client::Impl>> shards;
  {
    std::lock_guard lk(mu_);
    closed_ = true;
    shards = shards_;
  }
  for (auto& s : shards) s->shutdown();
}

}  // namespace zklock::detail

namespace zklock {

bool Client::Impl::try_seat(std::size_t bytes) {
  auto seated = seated_bytes_.load(std::memory_order_relaxed);
  do {
    if (seated + bytes > opts.watch_budget_bytes) return false;
  } while (!seated_bytes_.compare_exchange_weak(seated, seated + bytes, std::memory_order_relaxed));
  return true;
}

}  // namespace zklock
