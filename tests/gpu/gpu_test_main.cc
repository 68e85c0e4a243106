// main() of the GPU test binaries. Without a visible CUDA device the binary prints why and exits
// 77, which ctest reports as skipped (SKIP_RETURN_CODE); under mpirun every rank does the same and
// mpirun passes the status on. Otherwise: as tests/mpi/mpi_test_main.cc (MPI owned by the test,
// rank 0 prints the gtest report, other ranks their failures, any failing rank fails the job).
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>

#include "hvd/hvd.h"

namespace {

class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] FAILURE %s:%d\n%s\n", rank_,
                   r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }

 private:
  int rank_;
};

}  // namespace

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t rc = cudaGetDeviceCount(&devices);
  if (rc != cudaSuccess || devices == 0) {
    std::printf("SKIPPED: no CUDA device visible (%s); the gpu tests need one.\n",
                rc != cudaSuccess ? cudaGetErrorString(rc) : "cudaGetDeviceCount returned 0");
    std::fflush(stdout);
    return 77;
  }
  testing::InitGoogleTest(&argc, argv);
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != 0) {
    auto& listeners = testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
    listeners.Append(new RankFailurePrinter(rank));
  }
  int result = RUN_ALL_TESTS();
  try {
    if (hvd::initialized()) hvd::shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] hvd::shutdown failed: %s\n", rank, e.what());
    result = 1;
  }
  MPI_Finalize();
  return result;
}
