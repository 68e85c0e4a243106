// A job where rank 1 never submits 'lonely'. With HVD_STALL_CHECK_TIME_SECONDS=1 and
// HVD_STALL_SHUTDOWN_TIME_SECONDS=3, rank 0 warns (naming 'lonely' and rank 1), then fails the
// tensor on every rank that submitted it and shuts hvd down; rank 1's next call fails with the
// same reason. Every rank exits 1 with its error; tests/reliability/test_stall.sh checks the
// output.
#include <hvd/hvd.h>

#include <chrono>
#include <cstdio>
#include <thread>
#include <vector>

int main() {
  hvd::init();
  const int rank = hvd::rank();
  std::vector<float> v(16, 1.0f);
  try {
    if (rank != 1) {
      hvd::allreduce(v, "lonely");
    } else {
      std::this_thread::sleep_for(std::chrono::seconds(6));
      hvd::allreduce(v, "after");
    }
    std::printf("rank %d: UNEXPECTED success\n", rank);
    hvd::shutdown();
    return 0;
  } catch (const hvd::Error& e) {
    std::printf("rank %d: error: %s\n", rank, e.what());
    std::fflush(stdout);
    hvd::shutdown();
    return 1;
  }
}
