// An idle runtime does not spin. The background thread polls before it sleeps (HVD_WAIT_POLL_US,
// runtime/runtime.cc) only after a cycle that performed an operation. ctest runs this with
// HVD_WAIT_POLL_US=10000 and HVD_CYCLE_TIME=10: a background thread that polled after every cycle,
// as it did before, spun for the whole 10 ms cycle and used a whole core while the job did
// nothing (measured: 1000 us polls on 1 ms cycles, ~990 ms of CPU per idle second; the default
// 50 us, 7 % of a core). Every rank checks its own process's CPU time while its user thread
// sleeps, and that operations still complete with the right values after the idle time.
#include <gtest/gtest.h>

#include <sys/resource.h>

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "common/sanitizers.h"
#include "hvd/hvd.h"
#include "tests/support/test_collectives_util.h"

namespace hvdtest {
namespace {

class IdlePoll : public HvdTest {};

double process_cpu_seconds() {
  rusage u{};
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_utime.tv_sec + u.ru_stime.tv_sec) +
         1e-6 * static_cast<double>(u.ru_utime.tv_usec + u.ru_stime.tv_usec);
}

// The process's CPU time while the calling thread sleeps `ms`, and the wall time it slept.
struct Idle {
  double cpu = 0, wall = 0;
};
Idle idle_for(int ms) {
  const double cpu0 = process_cpu_seconds();
  const auto t0 = std::chrono::steady_clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(ms));
  return {process_cpu_seconds() - cpu0,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

bool env_is(const char* name, const std::string& value) {
  const char* v = std::getenv(name);
  return v != nullptr && value == v;
}

void expect_sum(int rank, int size, int step) {
  std::vector<float> v(8, static_cast<float>(rank + step));
  hvd::allreduce(v, "idle_poll.sum", hvd::ReduceOp::kSum);
  const float want = static_cast<float>(size * (size - 1) / 2 + size * step);
  for (float x : v) ASSERT_EQ(x, want) << "step " << step;
}

TEST_F(IdlePoll, AnIdleRuntimeDoesNotSpinBetweenCycles) {
  if (std::getenv("HVD_TEST_IDLE_ALONE") != nullptr) GTEST_SKIP() << "test_idle_poll.alone.np1";
  ASSERT_TRUE(env_is("HVD_WAIT_POLL_US", "10000") && env_is("HVD_CYCLE_TIME", "10"))
      << "run through ctest, which sets HVD_WAIT_POLL_US=10000 and HVD_CYCLE_TIME=10";
  expect_sum(rank_, size_, 0);  // the job was active: one poll may follow this operation
  const Idle idle = idle_for(800);
  // ~100 empty cycles a second, each a few tens of microseconds (more under a sanitizer); one
  // 10 ms poll after the operation above. A thread that spins in every cycle uses ~wall.
  EXPECT_LT(idle.cpu, 0.3 * idle.wall)
      << "rank " << rank_ << ": the process used " << static_cast<int>(idle.cpu * 1e3)
      << " ms of CPU in " << static_cast<int>(idle.wall * 1e3)
      << " ms while its user thread slept: an idle background thread "
         "polls between its cycles";
  for (int step = 1; step <= 3; ++step) expect_sum(rank_, size_, step);
  hvd::barrier();
}

// A job of one rank with nothing in flight does not cycle at all: its background thread sleeps
// until a submission (runtime/runtime.cc, wait_for_work). Run by ctest as test_idle_poll.alone.np1
// with HVD_CYCLE_TIME=1 and HVD_WAIT_POLL_US=0, where a thread that woke every cycle used 17-24 ms
// of CPU per idle second on this project's VM, and the sleeping one ~0.1 ms. Skipped elsewhere.
TEST_F(IdlePoll, AJobOfOneRankSleepsUntilASubmission) {
  if (size_ != 1 || !env_is("HVD_WAIT_POLL_US", "0") || !env_is("HVD_CYCLE_TIME", "1"))
    GTEST_SKIP() << "for one rank with HVD_CYCLE_TIME=1 and HVD_WAIT_POLL_US=0 (ctest: "
                    "test_idle_poll.alone.np1)";
  if (hvd::kThreadSanitizer) GTEST_SKIP() << "TSan's own thread uses CPU while idle";
  // Through the background thread too (a grouped call never runs inline), then idle.
  std::vector<float> a(8, 1.0f), b(8, 2.0f);
  auto ref = [](std::vector<float>& v) {
    return hvd::TensorRef(v.data(), hvd::DataType::kFloat32, {static_cast<int64_t>(v.size())});
  };
  hvd::grouped_allreduce(std::vector<hvd::TensorRef>{ref(a), ref(b)}, "idle_poll.group",
                         hvd::ReduceOp::kSum);
  for (float x : a) EXPECT_EQ(x, 1.0f);
  for (float x : b) EXPECT_EQ(x, 2.0f);
  expect_sum(rank_, size_, 0);
  const Idle idle = idle_for(1000);
  EXPECT_LT(idle.cpu, 0.005 * idle.wall)
      << "the process used " << static_cast<int>(idle.cpu * 1e3) << " ms of CPU in "
      << static_cast<int>(idle.wall * 1e3)
      << " ms while its only rank was idle: its background thread cycles";
  for (int step = 1; step <= 3; ++step) expect_sum(rank_, size_, step);
  std::vector<float> c(8, 3.0f);
  hvd::grouped_allreduce(std::vector<hvd::TensorRef>{ref(c)}, "idle_poll.group_after",
                         hvd::ReduceOp::kSum);
  for (float x : c) EXPECT_EQ(x, 3.0f);
}

}  // namespace
}  // namespace hvdtest
