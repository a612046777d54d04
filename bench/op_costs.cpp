// `ops`: the raw C-API operations zklock's steps are made of, timed next to
// the textbook step each replaces.
#include <algorithm>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "floor.hpp"
#include "scenario_support.hpp"
#include "scenarios.hpp"

namespace zklock::bench {

using std::chrono::milliseconds;

// What zklock's steps cost on the raw C API, next to the textbook step they
// replace (same session, same server, no library): explains the cycle figures.
Figures op_costs(const Env& env, const Sizes& s) {
  const int n = std::max(50, s.uncontended_cycles / 5);
  FloorSession fs(env.connect, kSessionTimeout);
  const auto path = env.root + "/ops";
  fs.ensure_path(path);
  zhandle_t* zh = fs.zh();
  const std::string short_prefix = path + "/lock-";
  const std::string long_prefix = path + "/" + std::string("w_0123456789abcdef_0123456789abcdef0123456789abcdef_");
  const std::string data(150, 'x');
  std::vector<double> c_short, c_long, del, multi, seq_cl, pipe_cl, exists_us;
  char buf[512];
  auto timed = [](auto&& fn) {
    const auto t0 = Clock::now();
    fn();
    return micros(Clock::now() - t0);
  };
  auto check = [](int rc, const char* what) {
    if (rc != ZOK) throw std::runtime_error(std::string("op costs: ") + what + ": " + zerror(rc));
  };
  for (int i = 0; i < n; ++i) {
    c_short.push_back(timed([&] {
      check(zoo_create(zh, short_prefix.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL | ZOO_SEQUENCE, buf,
                       sizeof buf), "create");
    }));
    const std::string a = buf;
    exists_us.push_back(timed([&] { check(zoo_exists(zh, a.c_str(), 0, nullptr), "exists"); }));
    del.push_back(timed([&] { check(zoo_delete(zh, a.c_str(), -1), "delete"); }));
    c_long.push_back(timed([&] {
      check(zoo_create(zh, long_prefix.c_str(), data.data(), int(data.size()), &ZOO_OPEN_ACL_UNSAFE,
                       ZOO_EPHEMERAL | ZOO_SEQUENCE, buf, sizeof buf), "create");
    }));
    const std::string b = buf;
    multi.push_back(timed([&] {
      zoo_op_t ops[2];
      zoo_op_result_t results[2];
      const std::string name = b.substr(b.rfind('/') + 1);
      zoo_delete_op_init(&ops[0], b.c_str(), -1);
      zoo_set_op_init(&ops[1], path.c_str(), name.data(), int(name.size()), -1, nullptr);
      check(zoo_multi(zh, 2, ops, results), "multi");
    }));
    std::string c;
    seq_cl.push_back(timed([&] {
      check(zoo_create(zh, short_prefix.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL | ZOO_SEQUENCE, buf,
                       sizeof buf), "create");
      String_vector kids{};
      check(zoo_get_children(zh, path.c_str(), 0, &kids), "get children");
      deallocate_String_vector(&kids);
    }));
    c = buf;
    check(zoo_delete(zh, c.c_str(), -1), "delete");
    pipe_cl.push_back(timed([&] {
      // Heap contexts, freed only once both answers are in (a timeout leaks
      // them rather than leave the C client a dangling pointer).
      auto* both = new Latch(2);
      auto* ctx = new std::pair<Latch*, std::string*>(both, &c);
      check(zoo_acreate(zh, short_prefix.c_str(), nullptr, -1, &ZOO_OPEN_ACL_UNSAFE, ZOO_EPHEMERAL | ZOO_SEQUENCE,
                        [](int, const char* v, const void* d) {
                          auto* p = static_cast<std::pair<Latch*, std::string*>*>(const_cast<void*>(d));
                          if (v) *p->second = v;
                          p->first->count_down();
                        },
                        ctx), "acreate");
      check(zoo_aget_children(zh, path.c_str(), 0,
                              [](int, const String_vector*, const void* d) {
                                static_cast<Latch*>(const_cast<void*>(d))->count_down();
                              },
                              both), "aget_children");
      if (!both->wait_for(milliseconds(30'000))) throw std::runtime_error("op costs: pipelined pair timed out");
      delete ctx;
      delete both;
    }));
    check(zoo_delete(zh, c.c_str(), -1), "delete");
  }
  const std::string sc = "raw C-API op costs (floor column: textbook step)";
  return {
      {sc, "create p50: zklock name+data | short", "us", percentile(c_long, 50), percentile(c_short, 50), {}},
      {sc, "release p50: multi(delete+marker) | delete", "us", percentile(multi, 50), percentile(del, 50), {}},
      {sc, "create+list p50: pipelined | sequential", "us", percentile(pipe_cl, 50), percentile(seq_cl, 50), {}},
      {sc, "exists p50 (a read round trip)", "us", percentile(exists_us, 50), kNone, {}},
  };
}

}  // namespace zklock::bench
