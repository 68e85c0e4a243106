# Strategies (runtime/training/strategy.cc) on 1..4 ranks, and on fake nodes of 2 ranks.
hvd_add_mpi_test(test_strategy test_strategy.cc)
add_test(NAME test_strategy.np4.fake_nodes
  COMMAND ${HVD_MPIEXEC} ${HVD_MPIEXEC_FLAGS} -np 4 $<TARGET_FILE:test_strategy>)
set_tests_properties(test_strategy.np4.fake_nodes PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 4
  ENVIRONMENT "${HVD_TEST_ROOT_ENV};HVD_TEST_FAKE_LOCAL_SIZE=2")

# Stall inspector: rank 1 never submits a tensor; the job must end non-zero, quickly, saying so.
add_executable(test_stall_program test_stall_program.cc)
target_link_libraries(test_stall_program PRIVATE hvd)
hvd_set_warnings(test_stall_program)
foreach(np 2 3)
  add_test(NAME test_stall.np${np}
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_stall.sh ${HVD_MPIEXEC} ${np} $<TARGET_FILE:test_stall_program>)
  set_tests_properties(test_stall.np${np} PROPERTIES LABELS mpi TIMEOUT 60 PROCESSORS ${np}
    ENVIRONMENT "${HVD_TEST_ROOT_ENV}" PASS_REGULAR_EXPRESSION "PASS: ended")
endforeach()

# Timeline: a Chrome trace with the phases of a fused allreduce, valid JSON also after an error.
add_executable(test_timeline_program test_timeline_program.cc)
target_link_libraries(test_timeline_program PRIVATE hvd)
hvd_set_warnings(test_timeline_program)
foreach(np 1 2 3)
  add_test(NAME test_timeline.np${np}
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_timeline.sh ${HVD_MPIEXEC} ${np} $<TARGET_FILE:test_timeline_program>)
  set_tests_properties(test_timeline.np${np} PROPERTIES LABELS mpi TIMEOUT 120 PROCESSORS ${np}
    ENVIRONMENT "${HVD_TEST_ROOT_ENV}" PASS_REGULAR_EXPRESSION "timeline ok")
endforeach()
add_test(NAME test_timeline.np2.ends_by_error
  COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_timeline.sh ${HVD_MPIEXEC} 2 $<TARGET_FILE:test_timeline_program> error)
set_tests_properties(test_timeline.np2.ends_by_error PROPERTIES LABELS mpi TIMEOUT 120 PROCESSORS 2
  ENVIRONMENT "${HVD_TEST_ROOT_ENV}" PASS_REGULAR_EXPRESSION "timeline ok")

# Lost ranks: SIGKILL (the launcher ends the job) and SIGSTOP (a silent peer: hvd names it).
add_executable(test_lost_rank_program test_lost_rank_program.cc)
target_link_libraries(test_lost_rank_program PRIVATE hvd)
hvd_set_warnings(test_lost_rank_program)
foreach(np 2 3)
  foreach(mode kill stop)
    add_test(NAME test_lost_rank.${mode}.np${np}
      COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_lost_rank.sh ${HVD_MPIEXEC} ${np} $<TARGET_FILE:test_lost_rank_program> ${mode})
    set_tests_properties(test_lost_rank.${mode}.np${np} PROPERTIES LABELS mpi TIMEOUT 90 PROCESSORS ${np}
      ENVIRONMENT "${HVD_TEST_ROOT_ENV}" PASS_REGULAR_EXPRESSION "PASS: ended")
  endforeach()
endforeach()

# Stall timing and blame: rank 1 skips one of four gradients in a training loop. Warnings come
# 2-4 s into the stall and every 2 s after, name both stalled tensors with who submitted them, and
# every rank ends with one error line through hvd's terminate handler (no abort backtrace).
add_executable(test_stall_skip_program test_stall_skip_program.cc)
target_link_libraries(test_stall_skip_program PRIVATE hvd)
hvd_set_warnings(test_stall_skip_program)
foreach(np 2 3 4)
  add_test(NAME test_stall_timing.np${np}
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_stall_timing.sh ${HVD_MPIEXEC} ${np} $<TARGET_FILE:test_stall_skip_program>)
  set_tests_properties(test_stall_timing.np${np} PROPERTIES LABELS mpi TIMEOUT 90 PROCESSORS ${np}
    ENVIRONMENT "${HVD_TEST_ROOT_ENV}" PASS_REGULAR_EXPRESSION "PASS: warnings")
endforeach()

# A healthy but slow rank is never declared lost: the last rank's background thread pauses 7 s
# with a 2 s peer timeout; rank 0 asks its watchdog, finds it alive, and waits.
add_executable(test_slow_rank_program test_slow_rank_program.cc)
target_link_libraries(test_slow_rank_program PRIVATE hvd)
hvd_set_warnings(test_slow_rank_program)
foreach(np 2 3)
  add_test(NAME test_slow_rank.np${np}
    COMMAND ${CMAKE_CURRENT_SOURCE_DIR}/test_slow_rank.sh ${HVD_MPIEXEC} ${np} $<TARGET_FILE:test_slow_rank_program>)
  set_tests_properties(test_slow_rank.np${np} PROPERTIES LABELS mpi TIMEOUT 150 PROCESSORS ${np}
    ENVIRONMENT "${HVD_TEST_ROOT_ENV}" PASS_REGULAR_EXPRESSION "PASS: a rank silent")
endforeach()
