// main() of the GPU test binaries. Without a visible CUDA device the binary prints why and exits
// 77, which ctest reports as skipped (SKIP_RETURN_CODE); under mpirun every rank does the same and
// mpirun passes the status on. Otherwise: as tests/support/mpi_test_main.cc
// (tests/support/rank_test_main.h).
#include <cuda_runtime_api.h>

#include <cstdio>

#include "tests/support/rank_test_main.h"

int main(int argc, char** argv) {
  int devices = 0;
  const cudaError_t rc = cudaGetDeviceCount(&devices);
  if (rc != cudaSuccess || devices == 0) {
    std::printf("SKIPPED: no CUDA device visible (%s); the gpu tests need one.\n",
                rc != cudaSuccess ? cudaGetErrorString(rc) : "cudaGetDeviceCount returned 0");
    std::fflush(stdout);
    return 77;
  }
  return hvdtest::run_rank_tests(argc, argv);
}
