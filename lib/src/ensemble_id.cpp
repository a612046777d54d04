// The ensemble id: read once per session from /zklock/ensemble-id, created there (race-safe) when absent.
#include <random>

#include "client_impl.hpp"
#include "zklock/protocol/paths.hpp"
#include "zklock/token.hpp"

namespace zklock {
namespace {
std::string new_uuid() {
  std::random_device rd;
  std::mt19937_64 gen((static_cast<std::uint64_t>(rd()) << 32) ^ rd());
  std::uniform_int_distribution<int> hex(0, 15);
  std::string s = "xxxxxxxx-xxxx-4xxx-yxxx-xxxxxxxxxxxx";
  for (char& c : s) {
    if (c == 'x' || c == 'y') {
      int v = hex(gen);
      if (c == 'y') v = (v & 0x3) | 0x8;
      c = "0123456789abcdef"[v];
    }
  }
  return s;
}
const std::string kEnsembleIdPath(protocol::kEnsembleIdPath);
}  // namespace

void Client::Impl::ensemble_id_async(std::function<void(Status, const std::string&)> done) {
  const auto ep = epoch();
  {
    std::lock_guard lk(mu_);
    if (!ensemble_id_.empty() && ensemble_epoch_ == ep) {
      defer([done = std::move(done), id = ensemble_id_] { done(Status{}, id); });
      return;
    }
  }
  read_ensemble_id(ep, 2, std::make_shared<std::function<void(Status, const std::string&)>>(std::move(done)));
}

// read → (absent) create /zklock, create the id → read again. Race-safe:
// whoever creates the node first wins and everyone reads the winner's id.
// Each step captures only what it needs, never itself: a callback that is
// dropped instead of run leaves no reference cycle behind.
void Client::Impl::read_ensemble_id(std::uint64_t ep, int attempts_left,
                                    std::shared_ptr<std::function<void(Status, const std::string&)>> done) {
  get(kEnsembleIdPath, nullptr, [this, done, ep, attempts_left](Status st, std::string data, const Stat&) {
    if (st.ok()) {
      if (!is_uuid(data)) {
        const std::string shown = data.size() > 64 ? data.substr(0, 64) + "..." : data;
        log->error("{} holds '{}', not a UUID (see docs/protocol.md)", kEnsembleIdPath, shown);
        (*done)(Status::own_error(Errc::protocol_error, kEnsembleIdPath + " holds '" + shown +
                                                            "', not a UUID (see docs/protocol.md)"),
                "");
        return;
      }
      {
        std::lock_guard lk(mu_);
        ensemble_id_ = data;
        ensemble_epoch_ = ep;
      }
      (*done)(st, data);
      return;
    }
    if (!st.is(Errc::no_node) || attempts_left == 0) {
      (*done)(st, "");
      return;
    }
    auto read_again = [this, done, ep, attempts_left](Status, const std::string&, const Stat&) {
      read_ensemble_id(ep, attempts_left - 1, done);
    };
    create(std::string(protocol::kMetadataRoot), "", CreateMode::persistent, [this, read_again](Status, const std::string&, const Stat&) {
      create(kEnsembleIdPath, new_uuid(), CreateMode::persistent, read_again);
    });
  });
}

}  // namespace zklock
