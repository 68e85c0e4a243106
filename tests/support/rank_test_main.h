#pragma once

// The body of main() of every multi-rank gtest binary (tests/support/mpi_test_main.cc, and
// tests/gpu/gpu_test_main.cc after its device check). ctest starts it under mpirun with 1..4 ranks;
// each rank runs every test and checks its own expected values. Rank 0 prints the usual gtest
// report; other ranks print only their failures (prefixed with the rank), so a failure on any rank
// is visible, and any failing rank exits non-zero, which makes mpirun exit non-zero. The test owns
// MPI here (as a user's program may): hvd::init() must then leave it alone.

#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <exception>

#include "hvd/hvd.h"

namespace hvdtest {

class RankFailurePrinter : public testing::EmptyTestEventListener {
 public:
  explicit RankFailurePrinter(int rank) : rank_(rank) {}
  void OnTestPartResult(const testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] FAILURE %s:%d\n%s\n", rank_,
                   r.file_name() ? r.file_name() : "?", r.line_number(), r.summary());
  }
  void OnTestEnd(const testing::TestInfo& info) override {
    if (info.result()->Failed())
      std::fprintf(stderr, "[rank %d] FAILED %s.%s\n", rank_, info.test_suite_name(), info.name());
  }

 private:
  int rank_;
};

inline int run_rank_tests(int argc, char** argv) {
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
  int rc = RUN_ALL_TESTS();
  try {
    if (hvd::initialized()) hvd::shutdown();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "[rank %d] hvd::shutdown failed: %s\n", rank, e.what());
    rc = 1;
  }
  MPI_Finalize();
  return rc;
}

}  // namespace hvdtest
