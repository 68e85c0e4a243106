// main() of every multi-rank gtest binary: ctest starts it under mpirun with 1..4 ranks
// (tests/support/rank_test_main.h says what each rank prints and how a failure on any rank fails).
#include "tests/support/rank_test_main.h"

int main(int argc, char** argv) { return hvdtest::run_rank_tests(argc, argv); }
