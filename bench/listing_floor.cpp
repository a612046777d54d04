// listing_floor.hpp: the bare loader. One shared queue of paths to list;
// the replies (on each session's completion thread) add the directories
// they find, and this thread issues while fewer than `depth` are out.
#include "listing_floor.hpp"

#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <stdexcept>
#include <vector>

#include "floor.hpp"
#include "platform_parts.hpp"
#include "zklock/protocol/node_name.hpp"

namespace zklock::bench {
namespace {

struct Load {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> todo;  // GUARDED_BY(mu)
  std::size_t inflight = 0, answered = 0;
  int error = ZOK;
};
// One listing's context; shares the Load so a late reply stays safe.
struct Listing {
  std::shared_ptr<Load> load;
  std::string path;
};

void listed(int rc, const String_vector* names, const void* data) {
  std::unique_ptr<Listing> l(static_cast<Listing*>(const_cast<void*>(data)));
  auto& load = *l->load;
  std::lock_guard lk(load.mu);
  if (rc == ZOK) {
    for (int i = 0; names != nullptr && i < names->count; ++i) {
      if (!protocol::parse_lock_node_name(names->data[i])) load.todo.push_back(l->path + "/" + names->data[i]);
    }
  } else if (rc != ZNONODE && load.error == ZOK) {
    load.error = rc;
  }
  --load.inflight;
  ++load.answered;
  load.cv.notify_all();
}

}  // namespace

ListingFloor listing_floor(const Env& env, const std::string& root, int sessions, std::size_t depth) {
  std::vector<std::unique_ptr<FloorSession>> zs;
  for (int i = 0; i < std::max(sessions, 1); ++i) zs.push_back(std::make_unique<FloorSession>(env.connect, std::chrono::seconds(30)));
  auto load = std::make_shared<Load>();
  load->todo.push_back(root);
  ListingFloor out;
  const double cpu0 = env.server_pid ? proc_cpu_seconds(env.server_pid) : kNone;
  const auto t0 = Clock::now(), deadline = t0 + std::chrono::minutes(10);
  std::size_t next = 0;
  {
    std::unique_lock lk(load->mu);
    for (;;) {
      // The C client only queues the request: issuing under mu blocks no reply.
      while (!load->todo.empty() && load->inflight < depth) {
        auto* l = new Listing{load, std::move(load->todo.front())};
        load->todo.pop_front();
        const int rc = zoo_aget_children(zs[next++ % zs.size()]->zh(), l->path.c_str(), 1, listed, l);
        if (rc != ZOK) {
          delete l;
          throw std::runtime_error(std::string("listing floor: ") + zerror(rc));
        }
        ++load->inflight;
      }
      if (load->error != ZOK) throw std::runtime_error(std::string("listing floor: ") + zerror(load->error));
      if (load->todo.empty() && load->inflight == 0) break;
      const auto seen = load->answered;
      if (!load->cv.wait_until(lk, deadline, [&] { return load->answered != seen; })) {
        throw std::runtime_error("listing floor: no answer within 10 minutes");
      }
    }
    out.listings = load->answered;
  }
  out.seconds = seconds(Clock::now() - t0);
  if (env.server_pid) out.server_cpu = proc_cpu_seconds(env.server_pid) - cpu0;
  return out;  // closing the sessions drops their watches
}

}  // namespace zklock::bench
