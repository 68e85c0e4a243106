# Strategies (runtime/training/strategy.cc) on 1..4 ranks, and on fake nodes of 2 ranks.
hvd_add_mpi_test(test_strategy test_strategy.cc)
add_test(NAME test_strategy.np4.fake_nodes
  COMMAND ${HVD_MPIEXEC} ${HVD_MPIEXEC_FLAGS} -np 4 $<TARGET_FILE:test_strategy>)
set_tests_properties(test_strategy.np4.fake_nodes PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 4
  ENVIRONMENT "${HVD_TEST_ROOT_ENV};HVD_TEST_FAKE_LOCAL_SIZE=2")
