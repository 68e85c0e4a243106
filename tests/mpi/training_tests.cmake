# runtime/training/ multi-rank tests: the Checkpointer (save on rank 0, restore everywhere).
hvd_add_mpi_test(test_checkpoint test_checkpoint.cc NP 1 2 3 4 TIMEOUT 120)

# Kill test: SIGKILL a saving process 20 times at random moments; every restore must find a good
# checkpoint, never a torn one. The tool also reads files directly (runtime/training/checkpoint_io),
# whose sources it compiles in so as not to depend on libhvd's internal symbols.
add_executable(test_checkpoint_kill_tool test_checkpoint_kill_tool.cc
  ${PROJECT_SOURCE_DIR}/runtime/training/safetensors.cc
  ${PROJECT_SOURCE_DIR}/runtime/training/checkpoint_io.cc)
target_link_libraries(test_checkpoint_kill_tool PRIVATE hvd)
target_include_directories(test_checkpoint_kill_tool PRIVATE ${PROJECT_SOURCE_DIR})
hvd_set_warnings(test_checkpoint_kill_tool)
# One rank, started directly as a singleton MPI process: mpirun's start-up (seconds on a loaded
# machine) times 40 runs would not fit the time limit. The script also takes a launcher and NP.
add_test(NAME test_checkpoint_kill
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/test_checkpoint_kill.sh $<TARGET_FILE:test_checkpoint_kill_tool> 1)
set_tests_properties(test_checkpoint_kill PROPERTIES LABELS mpi TIMEOUT 90 ENVIRONMENT "${HVD_TEST_ROOT_ENV}")
