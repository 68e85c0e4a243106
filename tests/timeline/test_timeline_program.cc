// Writes a timeline (HVD_TIMELINE) with a fused allreduce of three tensors, a broadcast and an
// allgather. With argument "error" it then returns 1 without calling hvd::shutdown(), as a job
// that ends by error: the timeline must still be a valid JSON file.
#include <hvd/hvd.h>

#include <cstdio>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  hvd::init();
  // A first allreduce takes the one-time costs (the timeline's first rows, allocations) out of the
  // three submissions below, which test_timeline.sh makes fall in one cycle (HVD_CYCLE_TIME=100).
  std::vector<float> warm(4, 1.0f);
  hvd::allreduce(warm, "warmup", hvd::ReduceOp::kSum);
  std::vector<std::vector<float>> t(3, std::vector<float>(1000, 1.0f));
  std::vector<hvd::Handle> hs;
  for (int i = 0; i < 3; ++i)
    hs.push_back(hvd::allreduce_async(std::span<float>(t[i]), "fused." + std::to_string(i),
                                      hvd::ReduceOp::kSum));
  for (auto& h : hs) h.wait();
  std::vector<int32_t> b(10, hvd::rank());
  hvd::broadcast(b, 0, "bcast");
  auto g = hvd::allgather(std::vector<int64_t>{hvd::rank()}, "gather");
  bool ok = t[0][0] == static_cast<float>(hvd::size()) && b[9] == 0 &&
            static_cast<int>(g.size()) == hvd::size();
  std::printf("rank %d: %s\n", hvd::rank(), ok ? "values ok" : "WRONG values");
  if (argc > 1 && std::string(argv[1]) == "error") return 1;  // no shutdown
  hvd::shutdown();
  return ok ? 0 : 1;
}
