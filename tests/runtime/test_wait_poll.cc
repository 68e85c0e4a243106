// HVD_WAIT_POLL_US: the rule that picks how long a thread about to sleep polls first
// (common/backoff.h, wait_poll_us), poll_for itself, the variable's parsing, and Handle::wait()
// polling its operation's completion (runtime/handle.h).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <thread>

#include "common/backoff.h"
#include "common/config.h"
#include "hvd/collectives.h"
#include "hvd/error.h"
#include "tests/support/test_util.h"
#include "runtime/handle.h"

namespace hvd {
namespace {

// The second argument is the cores the rank may count as its own (cluster/cores.h; e.g. 2 cores
// shared by 2 ranks: 1).
TEST(WaitPoll, AutoPollsOnlyWithTwoCoresPerRank) {
  EXPECT_EQ(wait_poll_us(-1, 2), 50);  // one rank on 2 cores: its user and background thread
  EXPECT_EQ(wait_poll_us(-1, 1), 0);   // one core: a spinning thread takes it from the other
  EXPECT_EQ(wait_poll_us(-1, 8), 50);  // 2 ranks on 16 cores, or SLURM --cpus-per-task=8
}

// The GPU finalizer is a rank's third polling thread: auto polls there only with three cores per
// rank (runtime/runtime.cc, ops/cuda/finalizer.h).
TEST(WaitPoll, TheFinalizerAsksForThreeCoresPerRank) {
  EXPECT_EQ(wait_poll_us(-1, 16, 3), 50);   // the GPU machine's 1 rank on 16 cores: on
  EXPECT_EQ(wait_poll_us(-1, 2, 3), 0);     // this VM's 2 cores at 1 rank: the other two poll
  EXPECT_EQ(wait_poll_us(-1, 3, 3), 50);    // 8 GPUs on 24 cores
  EXPECT_EQ(wait_poll_us(100, 2, 3), 100);  // a set value is taken as it is
}

TEST(WaitPoll, ASetValueIsTakenAsItIs) {
  EXPECT_EQ(wait_poll_us(0, 64), 0);
  EXPECT_EQ(wait_poll_us(200, 1), 200);
}

TEST(WaitPoll, PollForSeesAnAnswerFromAnotherThread) {
  std::atomic<bool> ready{false};
  std::thread t([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    ready = true;
  });
  // A poll far longer than the answer takes: it must end with the answer, not the time.
  EXPECT_TRUE(poll_for(10'000'000, [&] { return ready.load(); }));
  t.join();
  int calls = 0;
  EXPECT_FALSE(poll_for(1000, [&] { return ++calls < 0; }));  // never ready: ends by time
  EXPECT_GT(calls, 0);
  EXPECT_FALSE(poll_for(0, [] { return false; }));
}

TEST(WaitPoll, TheVariableIsParsedAndChecked) {
  const auto env = hvdtest::fake_env;
  EXPECT_EQ(load_config(env({})).wait_poll_us, -1);
  EXPECT_EQ(load_config(env({{"HVD_WAIT_POLL_US", "0"}})).wait_poll_us, 0);
  EXPECT_EQ(load_config(env({{"HOROVOD_WAIT_POLL_US", "120"}})).wait_poll_us, 120);
  for (const char* bad : {"-2", "50us", "1e9"}) {
    try {
      load_config(env({{"HVD_WAIT_POLL_US", bad}}));
      ADD_FAILURE() << "accepted HVD_WAIT_POLL_US=" << bad;
    } catch (const InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("HVD_WAIT_POLL_US"), std::string::npos) << e.what();
    }
  }
}

// Handle::wait() with a poll: an operation completed by another thread while the waiter polls, or
// after the poll (the waiter then sleeps on the condition variable), returns either way; a failure
// is thrown either way.
TEST(WaitPoll, HandleWaitReturnsWhetherTheCompletionComesDuringOrAfterThePoll) {
  auto signal = std::make_shared<detail::WakeSignal>();  // a runtime's (runtime/services.h)
  for (int64_t poll : {int64_t{0}, int64_t{50}, int64_t{100'000}}) {
    signal->poll_us = poll;
    for (int delay_us : {0, 200, 20'000}) {
      SCOPED_TRACE("poll " + std::to_string(poll) + " us, completion after " +
                   std::to_string(delay_us) + " us");
      auto state = detail::make_handle_state(2);
      state->wake = signal;  // as the queue stamps it
      Handle h(state);
      std::thread t([&] {
        std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
        state->complete_one();
        state->complete_one();
      });
      h.wait();
      EXPECT_TRUE(h.ready());
      t.join();

      auto failing = detail::make_handle_state(1);
      failing->wake = signal;
      Handle f(failing);
      std::thread u([&] {
        std::this_thread::sleep_for(std::chrono::microseconds(delay_us));
        failing->fail(detail::ErrorKind::kInvalidArgument, "a bad tensor");
      });
      EXPECT_THROW(f.wait(), InvalidArgumentError);
      u.join();
    }
  }
}

}  // namespace
}  // namespace hvd
