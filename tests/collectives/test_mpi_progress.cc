// A thread that drives MPI's progress engine while another thread's collective runs: hvd's
// watchdog (answering liveness probes every 100 ms) beside the background thread. Open MPI may then
// copy a fragment of the collective into its buffer inside the other thread's call. The two threads
// are ordered by Open MPI's atomics, which ThreadSanitizer cannot see (Open MPI is not built with
// it), so under TSan a read of the buffer after the collective was reported as a race with a write
// by the watchdog's thread. comm/mpi_context.h makes that order visible in TSan builds: MPI_CHECK
// ends with mpi_progress_seen(), and a thread other than the background thread holds an
// MpiProgressScope around its MPI calls (comm/watchdog.cc). Here a helper thread polls MPI
// continuously, as the watchdog does every 100 ms, so its calls make the copies far more often.
//
// In every build: every rank checks every element of every result, and the helper's polls never
// block the collectives (no lock order with MPI's own locks). Under TSan (`scripts/test
// --sanitize=thread`): no report. With mpi_progress_seen() and the scope made empty, TSan reported
// the race here (docs/reliability.md).
#include <gtest/gtest.h>
#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
#include <vector>

#include "comm/mpi_context.h"

namespace {

using hvd::comm::MpiProgressScope;

// Polls `comm` with MPI_Iprobe (a tag nobody sends) until stopped: each call runs MPI's progress.
class ProgressingThread {
 public:
  explicit ProgressingThread(MPI_Comm comm)
      : thread_([this, comm] {
          while (!stop_.load()) {
            int flag = 0;
            MPI_Status st;
            {
              const MpiProgressScope progress;
              MPI_Iprobe(MPI_ANY_SOURCE, kUnusedTag, comm, &flag, &st);
            }
            polls_.fetch_add(1);
            std::this_thread::sleep_for(std::chrono::microseconds(50));
          }
        }) {
    // Running before the collectives start.
    while (polls_.load() == 0) std::this_thread::yield();
  }
  ~ProgressingThread() {
    stop_.store(true);
    thread_.join();
  }

 private:
  static constexpr int kUnusedTag = 4321;
  std::atomic<bool> stop_{false};
  std::atomic<long> polls_{0};
  std::thread thread_;
};

struct Comms {
  Comms() {
    MPI_Comm_dup(MPI_COMM_WORLD, &data);
    MPI_Comm_dup(MPI_COMM_WORLD, &probe);
    MPI_Comm_rank(data, &rank);
    MPI_Comm_size(data, &size);
  }
  ~Comms() {
    MPI_Comm_free(&probe);
    MPI_Comm_free(&data);
  }
  MPI_Comm data = MPI_COMM_NULL, probe = MPI_COMM_NULL;
  int rank = 0, size = 1;
};

constexpr int kElements = 1 << 20;  // 4 MiB of float: many fragments on shared memory
constexpr int kRounds = 6;

// Rank r's element i in round k: small integers, so every sum is exact in float.
float value(int r, int k, int i) { return static_cast<float>(r + k + i % 7); }

TEST(MpiProgress, AllreduceBesideAProgressingThread) {
  Comms c;
  const ProgressingThread helper(c.probe);
  for (int k = 0; k < kRounds; ++k) {
    std::vector<float> buf(kElements);
    for (int i = 0; i < kElements; ++i) buf[i] = value(c.rank, k, i);
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf.data(), kElements, MPI_FLOAT, MPI_SUM, c.data));
    long wrong = 0;
    for (int i = 0; i < kElements; ++i) {
      float expected = 0;
      for (int r = 0; r < c.size; ++r) expected += value(r, k, i);
      wrong += buf[i] != expected;
    }
    EXPECT_EQ(wrong, 0) << "round " << k << " on rank " << c.rank;
  }
}

// The hierarchical ring's pattern (ops/hierarchical/allreduce.cc, RingOp::poll): nonblocking
// receives from the left neighbour completed by MPI_Test, then read at once.
TEST(MpiProgress, RingReceivesBesideAProgressingThread) {
  Comms c;
  const ProgressingThread helper(c.probe);
  const int left = (c.rank + c.size - 1) % c.size, right = (c.rank + 1) % c.size;
  for (int k = 0; k < kRounds; ++k) {
    std::vector<float> mine(kElements), got(kElements, -1.0f);
    for (int i = 0; i < kElements; ++i) mine[i] = value(c.rank, k, i);
    MPI_Request reqs[2];
    MPI_CHECK(MPI_Irecv(got.data(), kElements, MPI_FLOAT, left, k, c.data, &reqs[0]));
    MPI_CHECK(MPI_Isend(mine.data(), kElements, MPI_FLOAT, right, k, c.data, &reqs[1]));
    for (int done = 0; !done;) MPI_CHECK(MPI_Test(&reqs[0], &done, MPI_STATUS_IGNORE));
    long wrong = 0;
    for (int i = 0; i < kElements; ++i) wrong += got[i] != value(left, k, i);
    EXPECT_EQ(wrong, 0) << "round " << k << " on rank " << c.rank << " from rank " << left;
    MPI_CHECK(MPI_Wait(&reqs[1], MPI_STATUS_IGNORE));
  }
}

}  // namespace
