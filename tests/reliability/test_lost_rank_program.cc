// Rank 1 disappears in the middle of a long allreduce loop: with "kill" it dies (SIGKILL), with
// "stop" it freezes (SIGSTOP: alive but silent, as behind a dead link). Every other rank must fail
// within HVD_PEER_TIMEOUT_SECONDS (or be ended by the launcher) with output naming rank 1.
// With "link" nothing happens to rank 1: it prints LINK_READY at step 50 and goes on, and the test
// (tests/cluster/test_link_down.sh) takes its simulated node's network link down.
// With "handler" every rank installs a peer-loss handler (hvd::set_peer_loss_handler) that prints
// "rank R: peer-loss handler: <message>" and returns; the test freezes rank 1 inside its 50th
// allreduce (HVD_TEST_STOP_IN_OP=1:50), so that the other ranks are blocked in MPI with it and
// their watchdogs call the handler, then end the process (HVD_ON_PEER_LOSS=exit, status 70).
// An optional second argument names the rank that disappears in "kill" and "stop" (default 1;
// tests/reliability/test_control_tree.sh loses ranks in the middle of the control tree).
#include <hvd/hvd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {
int g_rank = -1;  // the handler must not call hvd
}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "kill";
  const int lost = argc > 2 ? std::atoi(argv[2]) : 1;
  if (mode == "handler")
    hvd::set_peer_loss_handler([](const std::string& message) {
      std::printf("rank %d: peer-loss handler: %s\n", g_rank, message.c_str());
      std::fflush(stdout);
      // As a real handler might (write a requeue marker, flush logs): take a moment before
      // returning, so that the other survivors' handlers run before this rank's exit makes mpirun
      // end the job.
      std::this_thread::sleep_for(std::chrono::seconds(2));
    });
  hvd::init();
  g_rank = hvd::rank();
  std::vector<float> v(1 << 16, 1.0f);
  try {
    for (int i = 0; i < 100000; ++i) {
      if (i == 50 && hvd::rank() == 1 && mode == "link") {
        std::printf("LINK_READY\n");
        std::fflush(stdout);
      } else if (i == 50 && hvd::rank() == lost && mode != "handler") {
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
