// Submits bursts of K small all-reduces back to back (all K asynchronously, then waits for them)
// and checks the values; with HVD_TIMELINE, check_burst_fusion.py counts from rank 0's timeline
// how many responses each burst took (test_burst_fusion.sh). Usage: PROGRAM K BURSTS
#include <hvd/hvd.h>

#include <cstdio>
#include <cstdlib>
#include <span>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const int k = argc > 1 ? std::atoi(argv[1]) : 3;
  const int bursts = argc > 2 ? std::atoi(argv[2]) : 200;
  hvd::init();
  std::vector<std::vector<float>> t(k, std::vector<float>(64));
  int wrong = 0;
  // One burst more than counted: the first one negotiates the names (slow path, uncached).
  for (int b = 0; b <= bursts; ++b) {
    std::vector<hvd::Handle> hs;
    hs.reserve(k);
    for (int j = 0; j < k; ++j) {
      for (auto& x : t[j]) x = static_cast<float>(j + 1);
      hs.push_back(hvd::allreduce_async(std::span<float>(t[j]), "burst." + std::to_string(j),
                                        hvd::ReduceOp::kSum));
    }
    for (auto& h : hs) h.wait();
    for (int j = 0; j < k; ++j)
      if (t[j][63] != static_cast<float>((j + 1) * hvd::size())) ++wrong;
  }
  std::printf("rank %d: %d bursts of %d, %d wrong values\n", hvd::rank(), bursts, k, wrong);
  hvd::shutdown();
  return wrong == 0 ? 0 : 1;
}
