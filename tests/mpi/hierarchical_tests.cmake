# The hierarchical all-reduce on fake nodes of 2 consecutive ranks (HVD_TEST_FAKE_LOCAL_SIZE):
# 4 ranks = 2 x 2 (the algorithm runs), 3 ranks = 2 + 1 (not homogeneous: falls back and says so),
# 1 and 2 ranks = one node. Included by tests/mpi/CMakeLists.txt.
hvd_add_mpi_test(test_hierarchical test_hierarchical.cc NP 1 2 3 4 TIMEOUT 300
  ENV HVD_TEST_FAKE_LOCAL_SIZE=2 HVD_HIERARCHICAL_ALLREDUCE=1)
# The rings with three members (3 x 2 and 2 x 3 fake nodes) need 6 ranks: one run, that test only.
add_test(NAME test_hierarchical.np6
  COMMAND ${HVD_MPIEXEC} ${HVD_MPIEXEC_FLAGS} -np 6 $<TARGET_FILE:test_hierarchical>
          --gtest_filter=HierarchicalOp.RingsOfThreeOnSixRanks)
set_tests_properties(test_hierarchical.np6 PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 6
  ENVIRONMENT "${HVD_TEST_ROOT_ENV};HVD_TEST_FAKE_LOCAL_SIZE=2")
