// A healthy but slow rank must never be declared lost. Run with HVD_PEER_TIMEOUT_SECONDS=2 and
// HVD_TEST_PAUSE_BACKGROUND=R:7:50: rank R's background thread stops taking part in the
// negotiation for 7 s (its watchdog still answers, as on an overloaded node). Every rank must go
// on and finish its 200 all-reduces with the right values; tests/reliability/test_slow_rank.sh
// checks that nobody was declared lost and that rank 0 said the rank was alive but slow.
#include <hvd/hvd.h>

#include <cstdio>
#include <vector>

int main() {
  hvd::init();
  const int rank = hvd::rank(), size = hvd::size();
  int wrong = 0;
  for (int i = 0; i < 200; ++i) {
    std::vector<float> v(4096, static_cast<float>(rank + i));
    hvd::allreduce(v, "slow.loop", hvd::ReduceOp::kSum);
    const float want = static_cast<float>(size * i + size * (size - 1) / 2);
    for (float x : v) wrong += x != want;
  }
  hvd::barrier();
  std::printf("rank %d: %s\n", rank, wrong == 0 ? "OK" : "WRONG VALUES");
  std::fflush(stdout);
  hvd::shutdown();
  return wrong == 0 ? 0 : 1;
}
