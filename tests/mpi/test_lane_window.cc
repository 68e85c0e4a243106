// The fusion window with lanes (runtime/tensor_queue.h, "Lanes"): a lane's submission reads no
// clock, so the background thread tells a burst still coming by the count of submissions moving
// (TensorQueue::Waiting, Runtime::wait_for_work). A burst of cached tensors whose gaps are each
// shorter than the window, but which lasts several windows in all, must still run as one fused
// batch, as it did when every submission carried its time. ctest runs this with
// HVD_FUSION_WINDOW=20000 (20 ms) and HVD_CYCLE_TIME=1000 (a cycle does not cut the burst either);
// the gaps are 2 ms, the burst ~30 ms (a gap stays under the window even on a loaded machine or
// under a sanitizer). Every rank counts its own batches (the fusion buffer's counters) and checks
// its values.
#include <gtest/gtest.h>

#include <chrono>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "hvd/hvd.h"
#include "ops/host_memory.h"
#include "tests/mpi/test_collectives_util.h"

namespace hvdtest {
namespace {

class LaneWindow : public HvdTest {};

TEST_F(LaneWindow, ABurstLongerThanTheWindowWithShortGapsRunsAsOneBatch) {
  constexpr int kTensors = 15, kSteps = 12, kCounted = 10;
  constexpr int64_t kCount = 256;
  std::vector<std::vector<float>> t(kTensors, std::vector<float>(kCount));
  int one_batch = 0, wrong = 0;
  for (int step = 0; step < kSteps; ++step) {
    const hvd::ops::FusionCopyCounts before = hvd::ops::fusion_copy_counts();
    std::vector<hvd::Handle> hs;
    for (int j = 0; j < kTensors; ++j) {
      for (auto& x : t[j]) x = static_cast<float>(j + 1);
      hs.push_back(hvd::allreduce_async(std::span<float>(t[j]), "lane_window." + std::to_string(j),
                                        hvd::ReduceOp::kSum));
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    for (auto& h : hs) h.wait();
    const hvd::ops::FusionCopyCounts after = hvd::ops::fusion_copy_counts();
    for (int j = 0; j < kTensors; ++j)
      for (float x : t[j]) wrong += x != static_cast<float>((j + 1) * hvd::size());
    // The first steps negotiate the names and open the lanes; the last kCounted are counted.
    if (step >= kSteps - kCounted && after.batches - before.batches == 1 &&
        after.packed_bytes - before.packed_bytes ==
            static_cast<int64_t>(kTensors * kCount * sizeof(float)))
      ++one_batch;
  }
  EXPECT_EQ(wrong, 0);
  // A sleep may oversleep on a loaded machine: most steps, not all.
  EXPECT_GE(one_batch, kCounted * 8 / 10)
      << "of " << kCounted << " bursts of " << kTensors << " cached tensors 2 ms apart, only "
      << one_batch << " ran as one batch with a 20 ms window";
}

}  // namespace
}  // namespace hvdtest
