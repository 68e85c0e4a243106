// A training loop in which rank 1 skips one gradient's all-reduce, as a user's trainer with a
// rank-dependent branch would: every step submits grad.0 .. grad.3 asynchronously and waits for
// them; at step 3 rank 1 leaves out grad.2. From then on rank 1 runs one grad.2 ahead, and after
// the last step it all-reduces 'images' (an evaluation count) while the other ranks still wait for
// the last grad.2. The program catches nothing: the uncaught hvd::Error ends each rank through
// hvd's terminate handler (one line, exit 1; runtime/terminate_handler.h).
// Before waiting on the last step's grad.2, the ranks other than 1 print "STALL BEGINS" so that
// tests/reliability/test_stall_timing.sh can time the stall warnings against it.
#include <hvd/hvd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

int main() {
  hvd::init();
  const int rank = hvd::rank();
  constexpr int kSteps = 6, kGrads = 4;
  std::vector<std::vector<float>> grads(kGrads, std::vector<float>(64, 1.0f));
  for (int step = 0; step < kSteps; ++step) {
    std::vector<hvd::Handle> handles;
    for (int g = 0; g < kGrads; ++g) {
      if (rank == 1 && step == 3 && g == 2) continue;  // the skipped all-reduce
      handles.push_back(
          hvd::allreduce_async(std::span<float>(grads[g]), "grad." + std::to_string(g)));
    }
    if (step == kSteps - 1 && rank != 1) {
      std::printf("rank %d: STALL BEGINS\n", rank);
      std::fflush(stdout);
    }
    for (auto& h : handles) h.wait();
    std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the step's compute
  }
  std::vector<int64_t> images{1000};
  hvd::allreduce(images, "images", hvd::ReduceOp::kSum);
  std::printf("rank %d: UNEXPECTED: finished\n", rank);
  hvd::shutdown();
  return 0;
}
