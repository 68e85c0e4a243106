// hvd/stop.h on 1-4 ranks: a stop request (a signal on one rank, signals on every rank at
// different steps, request_stop() from another thread) makes every rank stop after the same step,
// whatever the ranks' pace; no request never stops a run. Each test starts hvd afresh (the test
// owns MPI), so that one test's request does not reach the next.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "hvd/hvd.h"

namespace {

constexpr int kMaxSteps = 4000;  // bound: a stop that is never agreed fails instead of hanging

class Stop : public testing::Test {
 protected:
  void SetUp() override { hvd::init(); }
  void TearDown() override { hvd::shutdown(); }
};

// One training-like step: a blocking all-reduce (cached after the first step, so it runs through
// the lanes) whose result every rank checks, and a grouped all-reduce (a group unit once cached).
void step(int64_t s) {
  const int n = hvd::size(), r = hvd::rank();
  std::vector<double> v{static_cast<double>(r + s), 1.0};
  hvd::allreduce(v, "stop.step", hvd::ReduceOp::kSum);
  ASSERT_EQ(v[0], n * (n - 1) / 2.0 + static_cast<double>(n) * s) << "step " << s;
  ASSERT_EQ(v[1], n);
  std::vector<float> a(3, static_cast<float>(r)), b(5, 1.0f);
  hvd::grouped_allreduce({hvd::TensorRef(a.data(), hvd::DataType::kFloat32, {3}),
                          hvd::TensorRef(b.data(), hvd::DataType::kFloat32, {5})},
                         "stop.group", hvd::ReduceOp::kSum);
  ASSERT_EQ(a[2], n * (n - 1) / 2.0f);
  ASSERT_EQ(b[4], static_cast<float>(n));
}

// Every rank's stop step, gathered: all must be equal.
void expect_same_step_everywhere(int64_t stopped_after) {
  const std::vector<int64_t> all = hvd::allgather(std::vector<int64_t>{stopped_after}, "stop.at");
  for (int r = 0; r < hvd::size(); ++r)
    EXPECT_EQ(all[r], all[0]) << "rank " << r << " stopped after step " << all[r]
                              << ", rank 0 after " << all[0];
}

void pace(int64_t s) {  // the ranks run at different speeds, and change places now and then
  const int r = hvd::rank();
  if ((s + r) % 3 == 0) std::this_thread::sleep_for(std::chrono::microseconds(300 * (r + 1)));
}

}  // namespace

TEST_F(Stop, NoRequestNeverStops) {
  hvd::StopOnSignal stop;
  for (int64_t s = 1; s <= 300; ++s) {
    step(s);
    ASSERT_FALSE(stop.should_stop()) << "step " << s;
  }
  EXPECT_FALSE(hvd::stop_requested());
  EXPECT_EQ(stop.reason(), "");
}

TEST_F(Stop, SignalOnOneRankStopsEveryRankAfterTheSameStep) {
  hvd::StopOnSignal stop;
  const int signalled = hvd::size() / 2;  // rank 0 of 1, 1 of 2 and 3, 2 of 4
  constexpr int64_t kRaiseAt = 20;
  int64_t stopped_after = -1;
  for (int64_t s = 1; s <= kMaxSteps; ++s) {
    step(s);
    pace(s);
    if (hvd::rank() == signalled && s == kRaiseAt) ::raise(SIGUSR1);
    if (stop.should_stop()) {
      stopped_after = s;
      break;
    }
  }
  ASSERT_GE(stopped_after, kRaiseAt) << "never stopped within " << kMaxSteps << " steps";
  if (hvd::size() == 1) {
    EXPECT_EQ(stopped_after, kRaiseAt);  // no agreement to wait for
  }
  expect_same_step_everywhere(stopped_after);
  EXPECT_EQ(stop.reason(), "SIGUSR1 on rank " + std::to_string(signalled));
  EXPECT_EQ(hvd::stop_requested(), hvd::rank() == signalled);
  EXPECT_TRUE(stop.should_stop());  // stays true
  EXPECT_TRUE(hvd::stop_agreed());
}

TEST_F(Stop, SignalsOnEveryRankAtDifferentStepsGiveOneStep) {
  hvd::StopOnSignal stop({SIGTERM});
  const int64_t raise_at = 10 + 3 * hvd::rank();
  int64_t stopped_after = -1;
  for (int64_t s = 1; s <= kMaxSteps; ++s) {
    step(s);
    pace(s);
    if (s == raise_at) ::raise(SIGTERM);
    if (stop.should_stop()) {
      stopped_after = s;
      break;
    }
  }
  ASSERT_GE(stopped_after, 10);
  expect_same_step_everywhere(stopped_after);
  // Rank 0 raised first; ranks that had not raised yet when the ranks stopped are not named.
  EXPECT_EQ(stop.reason().rfind("SIGTERM on rank", 0), 0u) << stop.reason();
  EXPECT_NE(stop.reason().find(" 0"), std::string::npos) << stop.reason();
}

TEST_F(Stop, RequestFromAnotherThreadWhileStepsUseAsyncHandles) {
  hvd::StopOnSignal stop;
  std::thread asker;
  if (hvd::rank() == hvd::size() - 1)
    asker = std::thread([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(150));
      hvd::request_stop();
    });
  int64_t stopped_after = -1;
  std::vector<float> g(64);
  for (int64_t s = 1; s <= 100000; ++s) {
    for (auto& x : g) x = static_cast<float>(hvd::rank());
    hvd::Handle h = hvd::allreduce_async(std::span<float>(g), "stop.async", hvd::ReduceOp::kMax);
    pace(s);
    h.wait();
    ASSERT_EQ(g[63], static_cast<float>(hvd::size() - 1));
    if (stop.should_stop()) {
      stopped_after = s;
      break;
    }
  }
  if (asker.joinable()) asker.join();
  ASSERT_GT(stopped_after, 0) << "never stopped";
  expect_same_step_everywhere(stopped_after);
  EXPECT_EQ(stop.reason(), "hvd::request_stop() on rank " + std::to_string(hvd::size() - 1));
}

TEST_F(Stop, HandlersAreRestoredAndTheRequestEndsWithShutdown) {
  struct sigaction before {};
  ::sigaction(SIGUSR1, nullptr, &before);
  {
    hvd::StopOnSignal stop;
    struct sigaction during {};
    ::sigaction(SIGUSR1, nullptr, &during);
    EXPECT_NE(during.sa_handler, before.sa_handler);
    hvd::request_stop(SIGUSR1);
    EXPECT_EQ(hvd::stop_signal(), SIGUSR1);
    hvd::request_stop(SIGTERM);  // the first request's signal is kept
    EXPECT_EQ(hvd::stop_signal(), SIGUSR1);
  }
  struct sigaction after {};
  ::sigaction(SIGUSR1, nullptr, &after);
  EXPECT_EQ(after.sa_handler, before.sa_handler);
  // Every rank asked: the next step agrees. shutdown() then clears the request, and a new runtime
  // starts without one.
  int64_t s = 1;
  while (!hvd::stop_agreed() && s < kMaxSteps) step(s++);
  EXPECT_TRUE(hvd::stop_agreed());
  hvd::shutdown();
  hvd::init();
  EXPECT_FALSE(hvd::stop_requested());
  EXPECT_FALSE(hvd::stop_agreed());
  step(1);
  step(2);
  EXPECT_FALSE(hvd::stop_agreed());
}
