// Deadlocks made of nested `zklock exec` calls: `cycles`, `graph`, `revoke`
// and `revocations` by hand, and zklock-detector breaking one by itself.
#include <algorithm>
#include <iostream>
#include <thread>

#include "cli_fixture.hpp"
#include "zklock/client.hpp"
#include "zklock/protocol/node_name.hpp"

namespace zklock::cli_test {

// Two process trees take X then Y, and Y then X, as nested zklock exec calls
// with one owner each: a real deadlock.
TEST_F(CliTest, CrossOrderNestedExecsFormACycleThatRevokeBreaks) {
  const auto gate = dir_ / "gate";
  auto nested = [&](const std::string& first, const std::string& second) {
    return "echo held-" + first + "; " + wait_gate(gate) + "; \"$ZKLOCK_BIN\" exec " + second +
           " -- sh -c 'echo inner-ran'";
  };
  auto& alice = exec_background("X", nested("X", "Y"), {}, {{"ZKLOCK_OWNER", "alice"}});
  auto& bob = exec_background("Y", nested("Y", "X"), {}, {{"ZKLOCK_OWNER", "bob"}});
  ASSERT_TRUE(alice.read_until("held-X", 20s));
  ASSERT_TRUE(bob.read_until("held-Y", 20s));
  open_gate(gate);
  ASSERT_TRUE(wait_queue_size("X", 2) && wait_queue_size("Y", 2));

  // cycles
  json cycles;
  ASSERT_TRUE(eventually([&] {
    const auto r = zklock({"cycles", "--json"});
    if (r.code != 0) return false;
    cycles = json::parse(r.out);
    return cycles["cycles"].size() == 1;
  }, 20s));
  const auto& cycle = cycles["cycles"][0];
  EXPECT_EQ(cycle["owners"], json::array({"alice", "bob"}));
  EXPECT_EQ(cycle["text"], "alice -[" + root_ + "/Y]-> bob -[" + root_ + "/X]-> alice");
  ASSERT_EQ(cycle["waits"].size(), 2u);
  EXPECT_EQ(cycle["waits"][0]["kind"], "hard");
  auto r = zklock({"cycles"});
  ASSERT_EQ(r.code, 0);
  EXPECT_NE(r.out.find("cycle 1: alice -[" + root_ + "/Y]-> bob -[" + root_ + "/X]-> alice"), std::string::npos)
      << r.out;

  // graph in three formats
  r = zklock({"graph", "--format", "json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  auto g = json::parse(r.out);
  EXPECT_EQ(g["owners"], json::array({"alice", "bob"}));
  EXPECT_EQ(g["waits"].size(), 2u);
  EXPECT_EQ(g["cycles"].size(), 1u);
  ASSERT_EQ(g["locks"].size(), 2u);
  EXPECT_EQ(g["locks"][0]["path"], root_ + "/X");
  EXPECT_EQ(g["locks"][0]["holders"][0]["owner"], "alice");
  EXPECT_EQ(g["locks"][0]["waiters"][0]["owner"], "bob");
  r = zklock({"graph", "--format", "dot"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_TRUE(r.out.starts_with("digraph zklock {"));
  EXPECT_NE(r.out.find("\"lock:" + root_ + "/X\" -> \"owner:alice\" [label=\"holds\", style=bold, color=red"),
            std::string::npos) << r.out;
  EXPECT_NE(r.out.find("\"owner:bob\" -> \"lock:" + root_ + "/X\" [label=\"waits\", style=dashed, color=red"),
            std::string::npos) << r.out;
  r = zklock({"graph"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_NE(r.out.find("2 locks, 2 held, 2 waiting"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("bob waits for alice on " + root_ + "/X (hard)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1 cycle"), std::string::npos) << r.out;

  // revoke bob's waiting node on X: bob's inner exec is a deadlock victim (73),
  // so is bob's outer one (CMD's status); alice gets Y and finishes.
  const auto victim = cycle["waits"][1]["waiter_node"].get<std::string>();
  ASSERT_TRUE(victim.starts_with(root_ + "/X/")) << victim;
  r = zklock({"revoke", victim, "--reason", "operator breaks the cycle", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  const auto rj = json::parse(r.out);
  EXPECT_EQ(rj["outcome"], "revoked");
  EXPECT_EQ(rj["owner"], "bob");
  ASSERT_EQ(rj["records"].size(), 1u);

  const auto bob_st = bob.wait_exit(20s);
  ASSERT_TRUE(bob_st) << "the victim's tree did not end";
  EXPECT_TRUE(bob_st->exited() && bob_st->exit_code() == 73) << bob_st->describe();
  ASSERT_TRUE(alice.read_until("inner-ran", 20s));
  const auto alice_st = alice.wait_exit(20s);
  ASSERT_TRUE(alice_st);
  EXPECT_TRUE(alice_st->exited() && alice_st->exit_code() == 0) << alice_st->describe();

  // The record, listed.
  r = zklock({"revocations", "--json", "--limit", "100"});
  ASSERT_EQ(r.code, 0) << r.describe();
  const auto list = json::parse(r.out);
  const auto it = std::find_if(list["revocations"].begin(), list["revocations"].end(),
                               [&](const json& e) { return e["victim_node"] == victim; });
  ASSERT_NE(it, list["revocations"].end()) << r.out;
  EXPECT_EQ((*it)["victim_owner"], "bob");
  EXPECT_EQ((*it)["policy"], "operator");
  EXPECT_EQ((*it)["reason"], "operator breaks the cycle");
  EXPECT_TRUE((*it)["by"].get<std::string>().starts_with("zklock-cli:"));
  EXPECT_EQ((*it)["record"], rj["records"][0]);
  r = zklock({"revocations", "--limit", "100"});
  ASSERT_EQ(r.code, 0);
  EXPECT_NE(r.out.find(victim), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("operator breaks the cycle"), std::string::npos) << r.out;

  r = zklock({"cycles"});
  EXPECT_NE(r.out.find("no cycles"), std::string::npos) << r.out;
}

#ifdef ZKLOCK_DETECTOR_BINARY
// The same cross-order pair with zklock-detector running: it breaks the
// cycle by itself, one tree exits 73 with the cycle in its message, the
// other completes.
TEST_F(CliTest, DetectorMakesOneNestedExecADeadlockVictim) {
  test::SpawnOptions so;
  so.argv = {ZKLOCK_DETECTOR_BINARY, "--zk", zk_, "--root", root_, "--min-wait", "300ms", "--interval", "200ms",
             "--metrics-port", "0", "--session-timeout", "4s", "--id", "cli-test-detector"};
  so.capture_stdout = false;
  so.env_drop_prefixes = {"ZKLOCK_"};
  auto& detector = background(so);

  const auto gate = dir_ / "gate";
  auto nested = [&](const std::string& first, const std::string& second, const std::string& who) {
    return "echo held-" + first + "; " + wait_gate(gate) + "; \"$ZKLOCK_BIN\" exec " + second +
           " -- sh -c 'echo inner-ran' 2> '" + (dir_ / (who + ".err")).string() + "'";
  };
  auto& alice = exec_background("X", nested("X", "Y", "alice"), {}, {{"ZKLOCK_OWNER", "alice"}});
  auto& bob = exec_background("Y", nested("Y", "X", "bob"), {}, {{"ZKLOCK_OWNER", "bob"}});
  ASSERT_TRUE(alice.read_until("held-X", 20s));
  ASSERT_TRUE(bob.read_until("held-Y", 20s));
  const auto started = Clock::now();
  open_gate(gate);

  const auto a = alice.wait_exit(30s);
  const auto b = bob.wait_exit(30s);
  ASSERT_TRUE(a && b) << "the deadlock was not broken";
  std::cout << "[ figures  ] cycle broken and both trees done in "
            << std::chrono::duration_cast<milliseconds>(Clock::now() - started).count() << " ms\n";
  ASSERT_TRUE(a->exited() && b->exited()) << a->describe() << " / " << b->describe();
  const bool alice_victim = a->exit_code() == 73;
  EXPECT_NE(a->exit_code() == 73, b->exit_code() == 73) << "exactly one victim: " << a->describe() << " / "
                                                       << b->describe();
  EXPECT_EQ((alice_victim ? b : a)->exit_code(), 0);
  const auto err = read_file(dir_ / (alice_victim ? "alice.err" : "bob.err"));
  EXPECT_EQ(lines_of(err).size(), 1u) << err;
  EXPECT_NE(err.find("deadlock victim"), std::string::npos) << err;
  EXPECT_NE(err.find("alice -[" + root_ + "/Y]-> bob -[" + root_ + "/X]-> alice"), std::string::npos) << err;

  const auto r = zklock({"revocations", "--json", "--limit", "1000"});
  ASSERT_EQ(r.code, 0) << r.describe();
  bool found = false;
  const auto list = json::parse(r.out);
  for (const auto& e : list["revocations"]) {
    if (e["by"] == "cli-test-detector" && e["victim_node"].get<std::string>().starts_with(root_ + "/")) {
      found = true;
      EXPECT_EQ(e["victim_owner"], alice_victim ? "alice" : "bob");
      EXPECT_EQ(e["cycle"].size(), 2u);
    }
  }
  EXPECT_TRUE(found) << r.out;
  detector.terminate(5s);
}

#endif

// A cycle-shaped tree whose one wait states a 1 ms timeout: once that is
// past by more than the default 5 s skew allowance, the wait is abandoned
// (its owner gave up); `cycles` shows no cycle and names it, `queue` shows
// its state as abandoned (docs/detector.md, "Abandoned waits").
TEST_F(CliTest, AnAbandonedWaitClosesNoCycleAndQueueSaysSo) {
  Client c(ClientOptions{.connect = zk_});
  const auto x = root_ + "/X", y = root_ + "/Y";
  c.ensure_path(x, CreateMode::persistent);
  c.ensure_path(y, CreateMode::persistent);
  // The data as docs/protocol.md spells it, the field written by hand.
  const auto plant = [&](const std::string& lock, const std::string& owner, std::int64_t gives_up_after_ms) {
    json d{{"owner", owner}, {"host", "h"}, {"pid", 1}, {"mode", "exclusive"}, {"priority", 0}};
    if (gives_up_after_ms) d["gives_up_after_ms"] = gives_up_after_ms;
    const auto name = protocol::lock_node_prefix(Mode::exclusive, protocol::owner_key(owner), protocol::new_guid());
    return c.create(lock + "/" + name, d.dump(), CreateMode::ephemeral_sequential);
  };
  plant(x, "alice", 0);
  plant(y, "bob", 0);
  plant(x, "bob", 0);
  const auto abandoned = plant(y, "alice", 1);

  // Within its timeout and the allowance the wait counts.
  auto r = zklock({"cycles", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  EXPECT_EQ(json::parse(r.out)["cycles"].size(), 1u) << r.out;

  Stat st;
  c.get(abandoned, &st);
  const auto past = std::chrono::system_clock::time_point(milliseconds(st.ctime + 1 + 5000 + 50));
  std::this_thread::sleep_until(past);  // the claim's precondition: a clock condition
  r = zklock({"cycles", "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  const auto j = json::parse(r.out);
  EXPECT_TRUE(j["cycles"].empty()) << r.out;
  EXPECT_EQ(j["abandoned_waits"], json::array({abandoned})) << r.out;
  r = zklock({"cycles"});
  EXPECT_NE(r.out.find("abandoned wait (its owner gave up; counted in no cycle): " + abandoned), std::string::npos)
      << r.out;
  r = zklock({"queue", y, "--json"});
  ASSERT_EQ(r.code, 0) << r.describe();
  const auto q = json::parse(r.out);
  EXPECT_EQ(q["nodes"][0]["state"], "holds");
  EXPECT_EQ(q["nodes"][1]["state"], "abandoned") << r.out;
}

}  // namespace zklock::cli_test
