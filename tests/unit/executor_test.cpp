// The Executor without ZooKeeper: order of timers and deferred work, cancel,
// the callback thread, exceptions of every type caught and logged, and stop().
#include "executor.hpp"

#include <gtest/gtest.h>
#include <spdlog/sinks/ringbuffer_sink.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <thread>
#include <future>
#include <mutex>
#include <string>
#include <vector>

namespace zklock {
namespace {

using namespace std::chrono_literals;
using Clock = Executor::Clock;

// A logger that keeps what it was told, and a thread-safe list of events.
struct Recorder {
  std::shared_ptr<spdlog::sinks::ringbuffer_sink_mt> ring = std::make_shared<spdlog::sinks::ringbuffer_sink_mt>(64);
  std::shared_ptr<spdlog::logger> log = std::make_shared<spdlog::logger>("executor-test", ring);
  std::mutex mu;
  std::vector<std::string> seen;

  void note(std::string s) {
    std::lock_guard lk(mu);
    seen.push_back(std::move(s));
  }
  std::vector<std::string> events() {
    std::lock_guard lk(mu);
    return seen;
  }
  std::vector<std::string> logged() {
    ring->flush();
    return ring->last_formatted();
  }
};

// A started executor without a runner, over a Recorder.
class ExecutorTest : public ::testing::Test, public Recorder {
 protected:
  void SetUp() override { ex.start(); }
  Executor ex{log};
};

// The thread a deferred task (or a posted callback) runs on.
std::thread::id thread_of(Executor& ex, bool callback) {
  std::promise<std::thread::id> ran_on;
  auto note = [&] { ran_on.set_value(std::this_thread::get_id()); };
  if (callback) ex.post(note);
  else ex.defer(note);
  auto id = ran_on.get_future();
  EXPECT_EQ(id.wait_for(5s), std::future_status::ready);
  return id.get();
}

// Waits until everything queued before it on the timer thread and then on the
// callback thread has run.
void settle(Executor& ex) {
  std::promise<void> timers, callbacks;
  ex.defer([&] { timers.set_value(); });
  timers.get_future().wait();
  ex.post([&] { callbacks.set_value(); });
  callbacks.get_future().wait();
}

bool contains(const std::vector<std::string>& lines, const std::string& part) {
  for (const auto& l : lines) {
    if (l.find(part) != std::string::npos) return true;
  }
  return false;
}

TEST_F(ExecutorTest, TimersRunInTimeOrderAndDeferredWorkFirstInOrder) {
  std::promise<void> last;
  const auto now = Clock::now();
  ex.schedule_at(now + 60ms, [&] {
    note("late");
    last.set_value();
  });
  ex.schedule_at(now + 30ms, [&] { note("early"); });
  ex.defer([&] { note("deferred 1"); });
  ex.defer([&] { note("deferred 2"); });
  ASSERT_EQ(last.get_future().wait_for(5s), std::future_status::ready);
  EXPECT_EQ(events(), (std::vector<std::string>{"deferred 1", "deferred 2", "early", "late"}));
  EXPECT_GE(Clock::now(), now + 60ms);
}

TEST_F(ExecutorTest, DeferNeverRunsInline) { EXPECT_NE(thread_of(ex, false), std::this_thread::get_id()); }

TEST_F(ExecutorTest, CancelledTimerNeverRuns) {
  const auto id = ex.schedule_at(Clock::now() + 30ms, [&] { note("cancelled"); });
  ex.schedule_at(Clock::now() + 10ms, [&] { note("kept"); });
  ex.cancel(id);
  ex.cancel(12345);  // unknown: a no-op
  std::promise<void> after;
  ex.schedule_at(Clock::now() + 80ms, [&] { after.set_value(); });
  ASSERT_EQ(after.get_future().wait_for(5s), std::future_status::ready);
  EXPECT_EQ(events(), std::vector<std::string>{"kept"});
}

// A timer that replaces a cancelled earlier one (a retain timer, on every
// re-take and release) does not wake the loop, which still sleeps until the
// cancelled deadline; it runs on time all the same, after that deadline.
TEST_F(ExecutorTest, ATimerReplacingACancelledEarlierOneStillRunsOnTime) {
  const auto first = ex.schedule_at(Clock::now() + 40ms, [&] { note("cancelled"); });
  settle(ex);  // the loop now sleeps toward `first`
  ex.cancel(first);
  std::promise<Clock::time_point> ran;
  const auto due = Clock::now() + 80ms;
  ex.schedule_at(due, [&] { ran.set_value(Clock::now()); });
  auto when = ran.get_future();
  ASSERT_EQ(when.wait_for(5s), std::future_status::ready);
  EXPECT_GE(when.get(), due);
  EXPECT_TRUE(events().empty());
}

// A cancelled task is destroyed after the executor's lock is released: what
// it captured may call back into the executor as it goes (a lock attempt
// whose last reference sat in its keep-alive timer cancels its own timers).
// Destroyed under the lock, this cancel would deadlock on itself.
TEST_F(ExecutorTest, ACancelledTaskMayCallBackIntoTheExecutorAsItGoes) {
  struct CallsBack {
    Executor* ex;
    std::atomic<bool>* gone;
    ~CallsBack() {
      ex->cancel(98765);
      ex->defer([] {});
      gone->store(true);
    }
  };
  std::atomic<bool> gone{false};
  const auto id = ex.schedule_at(Clock::now() + 1h, [p = std::make_shared<CallsBack>(&ex, &gone)] {});
  // On another thread, so that a deadlock fails the test instead of hanging it here.
  auto done = std::make_shared<std::promise<void>>();
  std::thread([this, id, done] {
    ex.cancel(id);
    done->set_value();
  }).detach();
  ASSERT_EQ(done->get_future().wait_for(5s), std::future_status::ready) << "cancel deadlocked destroying its task";
  EXPECT_TRUE(gone.load());
}

// The loop is woken only for a deadline earlier than the one it sleeps
// until: an earlier timer added while it sleeps toward a far one still runs
// on time, and one that already ran can no longer be cancelled (the index is
// kept in step with the timers).
TEST_F(ExecutorTest, AnEarlierTimerAddedWhileTheLoopSleepsRunsOnTime) {
  const auto far = ex.schedule_at(Clock::now() + 10s, [&] { note("far"); });
  settle(ex);  // the loop now sleeps toward `far`
  for (int i = 0; i < 100; ++i) ex.schedule_at(Clock::now() + 20s, [] {});  // later: no wake-up
  std::promise<Clock::time_point> ran;
  const auto due = Clock::now() + 30ms;
  const auto near = ex.schedule_at(due, [&] { ran.set_value(Clock::now()); });
  auto when = ran.get_future();
  ASSERT_EQ(when.wait_for(5s), std::future_status::ready);
  EXPECT_GE(when.get(), due);
  ex.cancel(near);  // ran already: a no-op
  ex.cancel(far);
  EXPECT_TRUE(events().empty());
}

TEST_F(ExecutorTest, CallbacksRunInOrderOnTheirOwnThread) {
  const auto timer_id = thread_of(ex, false);
  for (int i = 0; i < 5; ++i) ex.post([this, i] { note("cb " + std::to_string(i)); });
  const auto cb_id = thread_of(ex, true);
  EXPECT_NE(cb_id, std::this_thread::get_id());
  EXPECT_NE(cb_id, timer_id);
  EXPECT_EQ(events(), (std::vector<std::string>{"cb 0", "cb 1", "cb 2", "cb 3", "cb 4"}));
}

struct NotAStdException {};

TEST_F(ExecutorTest, EveryExceptionTypeIsCaughtAndLoggedAndTheThreadsGoOn) {
  ex.defer([] { throw std::runtime_error("timer boom"); });
  ex.defer([] { throw NotAStdException{}; });
  ex.schedule_at(Clock::now() + 5ms, [] { throw 42; });
  ex.post([] { throw std::logic_error("callback boom"); });
  ex.post([] { throw NotAStdException{}; });
  std::promise<void> timer_after, callback_after;
  ex.schedule_at(Clock::now() + 20ms, [&] { timer_after.set_value(); });
  ASSERT_EQ(timer_after.get_future().wait_for(5s), std::future_status::ready);
  ex.post([&] { callback_after.set_value(); });
  ASSERT_EQ(callback_after.get_future().wait_for(5s), std::future_status::ready);

  const auto lines = logged();
  EXPECT_TRUE(contains(lines, "zklock timer task failed: timer boom"));
  EXPECT_TRUE(contains(lines, "zklock user callback threw: callback boom"));
  int foreign_timer = 0, foreign_callback = 0;
  for (const auto& l : lines) {
    if (l.find("zklock timer task failed with a non-standard exception") != std::string::npos) ++foreign_timer;
    if (l.find("zklock user callback threw a non-standard exception") != std::string::npos) ++foreign_callback;
  }
  EXPECT_EQ(foreign_timer, 2);
  EXPECT_EQ(foreign_callback, 1);
}

TEST(Executor, RunnerWrapsEveryTimerTaskButNoCallback) {
  Recorder f;
  std::atomic<int> wrapped{0};
  thread_local bool tl_inside = false;
  Executor ex(f.log, [&](const Executor::Task& task, bool draining) {
    EXPECT_FALSE(draining);
    ++wrapped;
    tl_inside = true;
    task();
    tl_inside = false;
  });
  ex.start();
  bool timer_inside = false, callback_inside = true;
  ex.defer([&] { timer_inside = tl_inside; });
  ex.post([&] { callback_inside = tl_inside; });
  settle(ex);
  EXPECT_TRUE(timer_inside);
  EXPECT_FALSE(callback_inside);
  EXPECT_EQ(wrapped.load(), 2);  // the deferred task and settle()'s
}

TEST(Executor, StopRunsDueDeferredWorkAndPostedCallbacksAndDropsTheRest) {
  Recorder f;
  std::atomic<int> draining_runs{0};
  Executor ex(f.log, [&](const Executor::Task& task, bool draining) {
    if (draining) ++draining_runs;
    task();
  });
  ex.start();
  // Hold the timer thread so the work below is still queued when stop() begins.
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::promise<void> holding;
  ex.defer([&] {
    holding.set_value();
    released.wait();
  });
  holding.get_future().wait();
  ex.schedule_at(Clock::now() + 1h, [&] { f.note("future timer"); });
  ex.defer([&] {
    f.note("deferred");
    ex.defer([&] { f.note("deferred by deferred"); });  // added while draining
    ex.post([&] { f.note("posted while draining"); });
  });
  ex.defer([] { throw std::runtime_error("late boom"); });
  std::thread stopper([&] { ex.stop(); });
  // stop() raises its flag at once, then waits for the held task; 200 ms is
  // ample for the first step even on a loaded machine.
  std::this_thread::sleep_for(200ms);
  release.set_value();
  stopper.join();
  auto events = f.events();  // the two threads interleave: compare as a set
  std::sort(events.begin(), events.end());
  EXPECT_EQ(events, (std::vector<std::string>{"deferred", "deferred by deferred", "posted while draining"}));
  EXPECT_EQ(draining_runs.load(), 3);
  EXPECT_TRUE(contains(f.logged(), "zklock timer task failed while closing: late boom"));

  ex.post([&] { f.note("posted after stop"); });
  ex.defer([&] { f.note("deferred after stop"); });
  ex.stop();  // idempotent
  EXPECT_EQ(f.events().size(), 3u);
}

TEST(Executor, StopWithoutStartAndTwiceIsHarmless) {
  Recorder f;
  Executor ex(f.log);
  ex.stop();
  ex.stop();
  Executor started(f.log);
  started.start();
  started.stop();
  started.stop();
}

}  // namespace
}  // namespace zklock
