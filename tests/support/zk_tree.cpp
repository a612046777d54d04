// zk_tree.hpp: pipelined listing and deletion of a subtree.
#include "zk_tree.hpp"

#include <algorithm>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <utility>

namespace zklock::test {
namespace {

using Clock = std::chrono::steady_clock;

// One call's replies. Each outstanding request holds a Ticket that shares
// the Flight, so a reply after the call gave up still finds it alive.
struct Flight {
  std::mutex mu;
  std::condition_variable cv;
  std::size_t inflight = 0;  // GUARDED_BY(mu)
  std::uint64_t answered = 0;
  // Listing: paths listed (with their depth) and children still to list.
  std::vector<std::pair<std::string, std::size_t>> listed, found;
  std::size_t deleted = 0, gone = 0, failed = 0;
};
struct Ticket {
  std::shared_ptr<Flight> f;
  std::string path;
  std::size_t depth;
};

std::string child_of(const std::string& dir, const char* name) {
  return dir == "/" ? "/" + std::string(name) : dir + "/" + name;
}

void on_children(int rc, const String_vector* names, const void* data) {
  std::unique_ptr<Ticket> t(static_cast<Ticket*>(const_cast<void*>(data)));
  std::lock_guard lk(t->f->mu);
  if (rc == ZOK) {
    t->f->listed.emplace_back(t->path, t->depth);
    for (int i = 0; names != nullptr && i < names->count; ++i) {
      t->f->found.emplace_back(child_of(t->path, names->data[i]), t->depth + 1);
    }
  } else if (rc != ZNONODE) {
    ++t->f->failed;
  }
  --t->f->inflight;
  ++t->f->answered;
  t->f->cv.notify_all();
}

void on_deleted(int rc, const void* data) {
  std::unique_ptr<Ticket> t(static_cast<Ticket*>(const_cast<void*>(data)));
  std::lock_guard lk(t->f->mu);
  if (rc == ZOK) ++t->f->deleted;
  else if (rc == ZNONODE) ++t->f->gone;
  else ++t->f->failed;
  --t->f->inflight;
  ++t->f->answered;
  t->f->cv.notify_all();
}

enum class Op { list, remove };

// Issues `pending` (and, for listings, the children the replies find) with
// at most `depth` outstanding; true once everything issued has answered,
// false if `deadline` came first (or a request could not be sent).
bool run(zhandle_t* zh, const std::shared_ptr<Flight>& f, std::deque<std::pair<std::string, std::size_t>> pending,
         Op op, std::size_t depth, Clock::time_point deadline) {
  std::unique_lock lk(f->mu);
  for (;;) {
    for (auto& p : f->found) pending.push_back(std::move(p));
    f->found.clear();
    // The C client only queues the request here: holding mu while issuing
    // cannot block a reply (which takes mu on the completion thread).
    while (!pending.empty() && f->inflight < std::max<std::size_t>(depth, 1)) {
      auto [path, d] = std::move(pending.front());
      pending.pop_front();
      auto* t = new Ticket{f, path, d};
      const int rc = op == Op::list ? zoo_aget_children(zh, path.c_str(), 0, on_children, t)
                                    : zoo_adelete(zh, path.c_str(), -1, on_deleted, t);
      if (rc != ZOK) {
        delete t;
        ++f->failed;
        return false;
      }
      ++f->inflight;
    }
    if (pending.empty() && f->inflight == 0 && f->found.empty()) return true;
    const auto seen = f->answered;
    if (!f->cv.wait_until(lk, deadline, [&] { return f->answered != seen; })) return false;
  }
}

}  // namespace

TreeListing list_tree(zhandle_t* zh, const std::string& root, std::chrono::milliseconds limit, std::size_t depth) {
  auto f = std::make_shared<Flight>();
  TreeListing out;
  out.complete = run(zh, f, {{root, 0}}, Op::list, depth, Clock::now() + limit);
  std::lock_guard lk(f->mu);
  out.complete = out.complete && f->failed == 0;
  for (auto& [path, d] : f->listed) {
    out.paths.push_back(std::move(path));
    out.depth.push_back(d);
  }
  return out;
}

SubtreeDeleted delete_subtree(zhandle_t* zh, const std::string& root, std::chrono::milliseconds limit,
                              std::size_t depth) {
  const auto started = Clock::now();
  const auto deadline = started + limit;
  SubtreeDeleted out;
  auto tree = list_tree(zh, root, limit, depth);
  std::size_t deepest = 0;
  for (auto d : tree.depth) deepest = std::max(deepest, d);
  std::vector<std::deque<std::pair<std::string, std::size_t>>> levels(tree.paths.empty() ? 0 : deepest + 1);
  for (std::size_t i = 0; i < tree.paths.size(); ++i) levels[tree.depth[i]].emplace_back(tree.paths[i], tree.depth[i]);
  auto f = std::make_shared<Flight>();
  // A level goes only once the one below it has answered: a parent's delete
  // must not overtake its children's.
  for (auto level = levels.rbegin(); level != levels.rend(); ++level) {
    if (!run(zh, f, std::move(*level), Op::remove, depth, deadline)) break;
  }
  {
    std::lock_guard lk(f->mu);
    out.deleted = f->deleted;
    out.gone = f->gone;
    // Unanswered, refused, and never sent (a level cut off by the deadline).
    const auto tried = f->deleted + f->gone + f->failed + f->inflight;
    out.failed = (tree.complete ? 0 : 1) + f->failed + f->inflight + (tree.paths.size() - std::min(tried, tree.paths.size()));
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - started).count();
  return out;
}

}  // namespace zklock::test
