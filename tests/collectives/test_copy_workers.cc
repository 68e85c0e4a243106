// ops/copy_workers.h: the helper threads of the host fusion buffer's copies (HVD_COPY_THREADS).
// Every slice runs once per call, on the calling thread or a helper, and run() returns only after
// all have; helpers take part when the caller is busy; calls follow each other with no slice
// lost or run twice (a helper late for one call must not run a slice of the next); more slices
// than one call's ticket holds; no helpers: all on the caller; helpers asleep at destruction; and
// HVD_COPY_THREADS's automatic value.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "ops/copy_workers.h"

namespace hvd::ops {
namespace {

TEST(CopyWorkers, EverySliceRunsOnceBeforeRunReturns) {
  for (int helpers : {0, 1, 2, 3}) {
    CopyWorkers w(helpers);
    EXPECT_EQ(w.helpers(), helpers);
    for (int slices : {1, 2, 3, 7, 16, 100}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(slices));
      w.run(slices, [&](int s) { hits[static_cast<size_t>(s)].fetch_add(1); });
      for (int s = 0; s < slices; ++s)
        ASSERT_EQ(hits[static_cast<size_t>(s)].load(), 1)
            << helpers << " helpers, " << slices << " slices: slice " << s;
    }
  }
}

TEST(CopyWorkers, NoHelpersRunsEverythingOnTheCaller) {
  CopyWorkers w(0);
  const auto me = std::this_thread::get_id();
  int calls = 0;
  w.run(5, [&](int) {
    EXPECT_EQ(std::this_thread::get_id(), me);
    ++calls;
  });
  EXPECT_EQ(calls, 5);
  EXPECT_EQ(w.shared_runs(), 0);
}

// Slices that take a while: the helpers wake up in time to take some.
TEST(CopyWorkers, HelpersTakeSlicesWhenTheCallerIsBusy) {
  CopyWorkers w(2);
  const auto me = std::this_thread::get_id();
  std::atomic<int> on_helpers{0};
  for (int call = 0; call < 20 && on_helpers.load() == 0; ++call)
    w.run(8, [&](int) {
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      if (std::this_thread::get_id() != me) on_helpers.fetch_add(1);
    });
  EXPECT_GT(on_helpers.load(), 0) << "no helper ever took a slice";
  EXPECT_GT(w.shared_runs(), 0);
}

// Many short calls back to back: a helper that wakes up late for one call must find nothing of
// it left, and must not run a slice of the next call twice or with the old function.
TEST(CopyWorkers, BackToBackCallsLoseNoSliceAndRunNoneTwice) {
  CopyWorkers w(3);
  std::vector<std::atomic<int>> hits(64);
  for (int call = 1; call <= 5000; ++call) {
    const int slices = 1 + call % 64;
    w.run(slices, [&](int s) { hits[static_cast<size_t>(s)].fetch_add(1); });
    for (int s = 0; s < slices; ++s) {
      ASSERT_EQ(hits[static_cast<size_t>(s)].exchange(0), 1) << "call " << call << " slice " << s;
    }
    for (int s = slices; s < 64; ++s) ASSERT_EQ(hits[static_cast<size_t>(s)].load(), 0);
  }
}

TEST(CopyWorkers, MoreSlicesThanOneTicketHolds) {
  CopyWorkers w(2);
  const int slices = CopyWorkers::kMaxSlices * 2 + 5;
  std::vector<std::atomic<int>> hits(static_cast<size_t>(slices));
  w.run(slices, [&](int s) { hits[static_cast<size_t>(s)].fetch_add(1); });
  for (int s = 0; s < slices; ++s) ASSERT_EQ(hits[static_cast<size_t>(s)].load(), 1) << s;
}

TEST(CopyWorkers, DestroyedWhileHelpersSleep) {
  for (int i = 0; i < 20; ++i) {
    CopyWorkers w(3);
    if (i % 2) w.run(4, [](int) {});
  }
  SUCCEED();
}

TEST(CopyWorkers, HelpersClampedToTheLimit) {
  EXPECT_EQ(CopyWorkers(-3).helpers(), 0);
  EXPECT_EQ(CopyWorkers(CopyWorkers::kMaxHelpers + 4).helpers(), CopyWorkers::kMaxHelpers);
}

// The second argument is the cores the rank may count as its own (cluster/cores.h).
TEST(CopyHelpers, SetValueWinsAutoCountsSpareCores) {
  EXPECT_EQ(copy_helpers(0, 64, 2), 0);
  EXPECT_EQ(copy_helpers(2, 1, 2), 2) << "set: used even where cores are shared";
  EXPECT_EQ(copy_helpers(99, 1, 2), CopyWorkers::kMaxHelpers);
  // auto (-1): cores per rank beyond the rank's own threads, at most 3
  EXPECT_EQ(copy_helpers(-1, 1, 2), 0) << "2 ranks on 2 cores";
  EXPECT_EQ(copy_helpers(-1, 2, 2), 0) << "1 rank on 2 cores";
  EXPECT_EQ(copy_helpers(-1, 3, 2), 1);
  EXPECT_EQ(copy_helpers(-1, 8, 2), 3) << "2 ranks on 16 cores";
  EXPECT_EQ(copy_helpers(-1, 4, 2), 2) << "4 ranks on 16 cores";
  EXPECT_EQ(copy_helpers(-1, 4, 3), 1) << "a GPU rank keeps a core for its finalizer";
  EXPECT_EQ(copy_helpers(-1, 0, 2), 0);
}

}  // namespace
}  // namespace hvd::ops
