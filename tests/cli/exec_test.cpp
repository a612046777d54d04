// `zklock exec`: mutual exclusion, FIFO and increasing tokens, the exported
// environment, CMD's status, signals, timeouts, shared holders, a lost lock.
#include <signal.h>

#include <iostream>

#include "cli_fixture.hpp"

namespace zklock::cli_test {

TEST_F(CliTest, ExecIsMutuallyExclusiveAndFifoWithIncreasingTokens) {
  const auto gate = dir_ / "gate";
  const auto log = dir_ / "log";
  auto& holder = exec_background("fifo", "echo \"holder $ZKLOCK_TOKEN\" >> '" + log.string() + "'; echo held; " +
                                             wait_gate(gate));
  ASSERT_TRUE(holder.read_until("held", 20s));
  constexpr int kWaiters = 10;
  for (int i = 0; i < kWaiters; ++i) {
    // The critical section logs its start and end with a pause between: an
    // overlapping one would interleave lines.
    exec_background("fifo",
                    "echo \"start " + std::to_string(i) + " $ZKLOCK_TOKEN\" >> '" + log.string() +
                        "'; sleep 0.02; echo \"end " + std::to_string(i) + "\" >> '" + log.string() + "'",
                    {}, {}, false);
    ASSERT_TRUE(wait_queue_size("fifo", static_cast<std::size_t>(i + 2))) << "waiter " << i << " never queued";
  }
  const auto started = Clock::now();
  open_gate(gate);
  for (auto& c : children_) {
    const auto st = c->wait_exit(60s);
    ASSERT_TRUE(st) << "an exec did not finish";
    EXPECT_TRUE(st->exited() && st->exit_code() == 0) << st->describe();
  }
  const auto drained = std::chrono::duration_cast<milliseconds>(Clock::now() - started);
  std::cout << "[ figures  ] 10 queued zklock exec invocations drained in " << drained.count() << " ms\n";

  const auto lines = lines_of(read_file(log));
  ASSERT_EQ(lines.size(), 1u + 2 * kWaiters) << read_file(log);
  std::int64_t last = czxid_of(lines[0]);
  for (int i = 0; i < kWaiters; ++i) {
    const auto& start = lines[static_cast<std::size_t>(1 + 2 * i)];
    const auto& end = lines[static_cast<std::size_t>(2 + 2 * i)];
    EXPECT_TRUE(start.starts_with("start " + std::to_string(i) + " ")) << "grant " << i << ": " << start;
    EXPECT_EQ(end, "end " + std::to_string(i)) << "critical sections overlapped";
    const auto czxid = czxid_of(start);
    EXPECT_GT(czxid, last) << "tokens must increase in grant order";
    last = czxid;
  }
}

TEST_F(CliTest, ExecExportsTokenLockAndOwner) {
  const auto out = dir_ / "env";
  const std::string script = "printf '%s\\n%s\\n%s\\n' \"$ZKLOCK_TOKEN\" \"$ZKLOCK_LOCK\" \"$ZKLOCK_OWNER\" > '" +
                             out.string() + "'";
  auto r = zklock({"exec", "envlock", "--", "sh", "-c", script}, {{"ZKLOCK_OWNER", "batch-7"}});
  ASSERT_EQ(r.code, 0) << r.describe();
  auto lines = lines_of(read_file(out));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_NE(lines[0].find(':'), std::string::npos);
  EXPECT_GT(czxid_of(lines[0]), 0);
  EXPECT_EQ(lines[1], root_ + "/envlock");
  EXPECT_EQ(lines[2], "batch-7");

  // Without ZKLOCK_OWNER: the default owner, exported all the same.
  r = zklock({"exec", "envlock", "--", "sh", "-c", script});
  ASSERT_EQ(r.code, 0) << r.describe();
  lines = lines_of(read_file(out));
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_FALSE(lines[2].empty());
  EXPECT_NE(lines[2], "batch-7");
}

TEST_F(CliTest, ExecPassesCmdStatusThrough) {
  auto r = zklock({"exec", "status", "--", "sh", "-c", "exit 3"});
  EXPECT_EQ(r.code, 3) << r.describe();
  EXPECT_TRUE(r.err.empty()) << r.describe();
  r = zklock({"exec", "status", "--", "sh", "-c", "kill -9 $$"});
  EXPECT_EQ(r.code, 128 + SIGKILL) << r.describe();
  r = zklock({"exec", "status", "--", "true"});
  EXPECT_EQ(r.code, 0) << r.describe();
  r = zklock({"exec", "status", "--", "/nonexistent/command"});
  EXPECT_EQ(r.code, 127) << r.describe();
  // The lock was released each time: nothing is left in the queue.
  const auto q = queue_json("status");
  ASSERT_FALSE(q.is_null());
  EXPECT_TRUE(q["nodes"].empty()) << q.dump();
}

TEST_F(CliTest, ExecForwardsSignalsToCmd) {
  const std::string script = "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.02; done";
  auto& child = exec_background("signals", script);
  ASSERT_TRUE(child.read_until("ready", 20s));
  ::kill(child.pid(), SIGTERM);  // zklock only, not its process group
  ASSERT_TRUE(child.read_until("got-term", 10s)) << "CMD never saw the forwarded SIGTERM";
  const auto st = child.wait_exit(10s);
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->exited() && st->exit_code() == 7) << st->describe();
}

TEST_F(CliTest, ExecSignalWhileWaitingCancelsTheWait) {
  const auto gate = dir_ / "gate";
  auto& holder = exec_background("cancel", "echo held; " + wait_gate(gate));
  ASSERT_TRUE(holder.read_until("held", 20s));
  auto& waiter = exec_background("cancel", "echo ran");
  ASSERT_TRUE(wait_queue_size("cancel", 2));
  const auto start = Clock::now();
  ::kill(waiter.pid(), SIGINT);
  const auto st = waiter.wait_exit(10s);
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->exited() && st->exit_code() == 128 + SIGINT) << st->describe();
  EXPECT_LT(Clock::now() - start, 2s) << "the cancelled wait must end promptly";
  EXPECT_FALSE(waiter.read_line(100ms)) << "CMD must not run";
  EXPECT_TRUE(wait_queue_size("cancel", 1)) << "the cancelled wait must leave no node";
  open_gate(gate);
  ASSERT_TRUE(holder.wait_exit(20s));
}

TEST_F(CliTest, ExecTimeoutExits75) {
  const auto gate = dir_ / "gate";
  auto& holder = exec_background("busy", "echo held; " + wait_gate(gate));
  ASSERT_TRUE(holder.read_until("held", 20s));
  const auto r = zklock({"exec", "busy", "--timeout", "500ms", "--", "sh", "-c", "echo ran"});
  EXPECT_EQ(r.code, 75) << r.describe();
  EXPECT_GE(r.took, 500ms);
  EXPECT_LT(r.took, 3000ms);
  EXPECT_TRUE(r.out.empty()) << "CMD must not run";
  EXPECT_NE(r.err.find("timed out after 500ms waiting for " + root_ + "/busy"), std::string::npos) << r.describe();
  EXPECT_TRUE(wait_queue_size("busy", 1)) << "the timed-out wait must leave no node";
  open_gate(gate);
  ASSERT_TRUE(holder.wait_exit(20s));
}

TEST_F(CliTest, ExecSharedHoldersRunTogetherAndExcludeAWriter) {
  const auto gate = dir_ / "shared-gate";
  // Two readers hold at once: both print before either is let go.
  auto& r1 = exec_background("rw", "echo reading; " + wait_gate(gate), {"--shared", "--owner", "reader-1"});
  auto& r2 = exec_background("rw", "echo reading; " + wait_gate(gate), {"--shared", "--owner", "reader-2"});
  ASSERT_TRUE(r1.read_until("reading", 20s));
  ASSERT_TRUE(r2.read_until("reading", 20s));
  // A writer cannot get in while they hold.
  const auto w = zklock({"exec", "rw", "--timeout", "300ms", "--", "sh", "-c", "echo wrote"});
  EXPECT_EQ(w.code, 75) << w.describe();
  const auto q = queue_json("rw");
  ASSERT_EQ(q["nodes"].size(), 2u);
  for (const auto& n : q["nodes"]) EXPECT_EQ(n["mode"], "shared");
  open_gate(gate);
  ASSERT_TRUE(r1.wait_exit(20s));
  ASSERT_TRUE(r2.wait_exit(20s));
  const auto w2 = zklock({"exec", "rw", "--timeout", "5s", "--", "sh", "-c", "echo wrote"});
  EXPECT_EQ(w2.code, 0) << w2.describe();
  EXPECT_NE(w2.out.find("wrote"), std::string::npos);
}

TEST_F(CliTest, ExecLostLockTerminatesCmdAndExits74) {
  const auto pidfile = dir_ / "pid";
  auto& child = exec_background("lost", "echo $$ > '" + pidfile.string() + "'; echo running; exec sleep 300");
  ASSERT_TRUE(child.read_until("running", 20s));
  const auto q = queue_json("lost");
  ASSERT_EQ(q["nodes"].size(), 1u);
  const auto node = q["nodes"][0]["path"].get<std::string>();
  const auto r = zklock({"revoke", node, "--reason", "lost-lock test"});
  ASSERT_EQ(r.code, 0) << r.describe();
  const auto st = child.wait_exit(20s);
  ASSERT_TRUE(st) << "zklock exec did not end after its node was revoked";
  EXPECT_TRUE(st->exited() && st->exit_code() == 74) << st->describe();
  const pid_t cmd_pid = std::stoi(read_file(pidfile));
  EXPECT_EQ(::kill(cmd_pid, 0), -1) << "CMD still running";
}

TEST_F(CliTest, ExecKillsACmdThatIgnoresSigtermAfterTheGrace) {
  auto& child = exec_background("stubborn", "trap '' TERM; echo running; while :; do sleep 0.02; done",
                                {"--grace", "300ms"});
  ASSERT_TRUE(child.read_until("running", 20s));
  const auto q = queue_json("stubborn");
  ASSERT_EQ(q["nodes"].size(), 1u);
  const auto start = Clock::now();
  ASSERT_EQ(zklock({"revoke", q["nodes"][0]["path"], "--reason", "grace test"}).code, 0);
  const auto st = child.wait_exit(20s);
  ASSERT_TRUE(st);
  EXPECT_TRUE(st->exited() && st->exit_code() == 74) << st->describe();
  EXPECT_GE(Clock::now() - start, 300ms);
}

}  // namespace zklock::cli_test
