// Rank 1 disappears in the middle of a long allreduce loop: with "kill" it dies (SIGKILL), with
// "stop" it freezes (SIGSTOP: alive but silent, as behind a dead link). Every other rank must fail
// within HVD_PEER_TIMEOUT_SECONDS (or be ended by the launcher) with output naming rank 1.
// With "link" nothing happens to rank 1: it prints LINK_READY at step 50 and goes on, and the test
// (tests/cluster/test_link_down.sh) takes its simulated node's network link down.
#include <hvd/hvd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "kill";
  hvd::init();
  std::vector<float> v(1 << 16, 1.0f);
  try {
    for (int i = 0; i < 100000; ++i) {
      if (i == 50 && hvd::rank() == 1 && mode == "link") {
        std::printf("LINK_READY\n");
        std::fflush(stdout);
      } else if (i == 50 && hvd::rank() == 1) {
        if (std::getenv("HVD_LOST_RANK_STAMP")) {  // for scripts/measure-lost-rank
          auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
          std::printf("LOST_AT %lld\n", static_cast<long long>(ns));
          std::fflush(stdout);
        }
        raise(mode == "stop" ? SIGSTOP : SIGKILL);
      }
      hvd::allreduce(v, "loop", hvd::ReduceOp::kSum);
      for (auto& x : v) x = 1.0f;
    }
  } catch (const hvd::Error& e) {
    std::printf("rank %d: error: %s\n", hvd::rank(), e.what());
    std::fflush(stdout);
    hvd::shutdown();
    return 1;
  }
  std::printf("rank %d: UNEXPECTED: the loop finished\n", hvd::rank());
  hvd::shutdown();
  return 0;
}
