// A cycle that one rank's timer started before its user thread submitted pairs with another rank's
// cycle that carries the tensor (the star AND pairs the ranks' n-th cycles). That other rank's
// request then stays pending, and its user thread is blocked on it: its next cycle must start at
// once, not one HVD_CYCLE_TIME later (Runtime::loop). ctest runs this with HVD_CYCLE_TIME=3000
// (3 s). Each round: every rank lines up on one all-reduce; the early rank submits at once, so its
// cycle pairs with the others' next timed cycle, 3 s later; the others submit 0.5 s after that
// cycle. Their all-reduce must then complete within half a cycle (it takes milliseconds); a rank
// that slept a cycle after its missed one made them wait ~2.5 s. Rounds: the early rank is rank 0
// (the root of the exchange) and the last rank, the tensor uncached (the slow path, through rank
// 0's table) and cached (the fast path, its lane); the early rank's user thread blocks at once
// (before its request is popped) or 0.5 s later (after). Every rank checks its own values.
#include <gtest/gtest.h>

#include <chrono>
#include <span>

#include <string>
#include <thread>
#include <vector>

#include "hvd/hvd.h"
#include "tests/support/test_collectives_util.h"

namespace hvdtest {
namespace {

class MissedCycle : public HvdTest {};

TEST_F(MissedCycle, TheRankWhoseCycleMissedTheOthersDoesNotSleepACycleBeforeTheNext) {
  using clock = std::chrono::steady_clock;
  constexpr double kCycleSeconds = 3.0;  // HVD_CYCLE_TIME, set by ctest
  struct Round {
    int early;
    const char* path;
    bool wait_later;  // the early rank waits 0.5 s after it submitted, its request popped by then
  };
  // The first round's name is new (the slow path); the next rounds find it cached (lanes).
  const Round rounds[] = {{0, "uncached", false},
                          {size_ - 1, "cached", false},
                          {0, "cached", true},
                          {size_ - 1, "cached", true}};
  int round_no = 0;
  for (const Round& round : rounds) {
    SCOPED_TRACE("round " + std::to_string(round_no) + ": rank " + std::to_string(round.early) +
                 " submits first, the tensor " + round.path +
                 (round.wait_later ? ", its wait 0.5 s later" : ", its wait at once"));
    std::vector<int32_t> line_up(1, 1);
    hvd::allreduce(line_up, "missed_cycle.line_up", hvd::ReduceOp::kSum);
    ASSERT_EQ(line_up[0], size_);
    if (rank_ !=
        round.early)  // past this rank's next timed cycle, which pairs with the early one's
      std::this_thread::sleep_for(std::chrono::duration<double>(kCycleSeconds + 0.5));
    std::vector<float> v(64, static_cast<float>(rank_ + round_no));
    const auto start = clock::now();
    hvd::Handle h =
        hvd::allreduce_async(std::span<float>(v), "missed_cycle.tensor", hvd::ReduceOp::kSum);
    if (rank_ == round.early && round.wait_later)
      std::this_thread::sleep_for(std::chrono::milliseconds(500));
    h.wait();
    const double took = std::chrono::duration<double>(clock::now() - start).count();
    const float want = static_cast<float>(size_ * (size_ - 1) / 2 + size_ * round_no);
    for (float x : v) ASSERT_EQ(x, want);
    if (rank_ != round.early && size_ > 1) {
      EXPECT_LT(took, kCycleSeconds / 2)
          << "rank " << rank_ << " waited " << took << " s for an all-reduce that rank "
          << round.early << " had submitted " << kCycleSeconds + 0.5 << " s earlier: rank "
          << round.early << " slept a cycle after the cycle that missed it";
    }
    ++round_no;
  }
}

}  // namespace
}  // namespace hvdtest
