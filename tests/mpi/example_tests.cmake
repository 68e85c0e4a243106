# Tests of the examples (included by tests/mpi/CMakeLists.txt). They run the example binaries
# under mpirun as a user would.
#   trainer_port.same_weights.npN   distributed trainer with N ranks == single-process trainer
#                                    (global batch 96, divisible by 1..4), label mpi
#   trainer_port.reject_batch.np4   a global batch 4 ranks cannot divide is refused, label mpi
#   allreduce_bench.smoke.npN       every dtype x op, sizes 0..5000 B, --tensors 10: no wrong value
#   allreduce_bench.compression.np3 the same under HVD_COMPRESSION=none, fp16, bf16 in one process
#   allreduce_bench.detects_wrong   --inject-wrong must make the run fail (the checker works)
#   allreduce_bench.sweep.np2, allreduce_bench.tensors1000.np2
#                                    the measured runs behind docs/benchmarks.md, label bench
#                                    (not part of the default run)

if(TARGET trainer_single AND TARGET trainer_distributed)
  set(_tp_script ${CMAKE_CURRENT_SOURCE_DIR}/test_trainer_port.sh)
  set(_tp_dir ${CMAKE_CURRENT_BINARY_DIR}/trainer_port)
  foreach(np 1 2 3 4)
    add_test(NAME trainer_port.same_weights.np${np}
      COMMAND bash ${_tp_script} same-weights $<TARGET_FILE:trainer_single>
              $<TARGET_FILE:trainer_distributed> ${_tp_dir} ${np} ${HVD_MPIEXEC} ${HVD_MPIEXEC_FLAGS})
    set_tests_properties(trainer_port.same_weights.np${np} PROPERTIES LABELS mpi TIMEOUT 120
      PROCESSORS ${np} ENVIRONMENT "${HVD_TEST_ROOT_ENV};GLOBAL_BATCH=96")
  endforeach()
  add_test(NAME trainer_port.reject_batch.np4
    COMMAND bash ${_tp_script} reject-batch $<TARGET_FILE:trainer_single>
            $<TARGET_FILE:trainer_distributed> ${_tp_dir} 4 ${HVD_MPIEXEC} ${HVD_MPIEXEC_FLAGS})
  set_tests_properties(trainer_port.reject_batch.np4 PROPERTIES LABELS mpi TIMEOUT 120
    PROCESSORS 4 ENVIRONMENT "${HVD_TEST_ROOT_ENV}")
endif()

if(TARGET allreduce_bench)
  set(_ab_env "${HVD_TEST_ROOT_ENV}")
  # Sizes 0, 1, 7, 49, 343, 2401 bytes (odd element counts for the 1-byte types), every dtype and
  # reduce op, 10 tensors per iteration; exit status 1 on any wrong value fails the test.
  foreach(np 2 3)
    add_test(NAME allreduce_bench.smoke.np${np}
      COMMAND ${HVD_MPIEXEC} ${HVD_MPIEXEC_FLAGS} -np ${np} $<TARGET_FILE:allreduce_bench>
              -b 0 -e 5000 -f 7 -d all -o all -n 2 -w 1 --tensors 10)
    set_tests_properties(allreduce_bench.smoke.np${np} PROPERTIES LABELS mpi TIMEOUT 300
      PROCESSORS ${np} ENVIRONMENT "${_ab_env}")
  endforeach()
  # HVD_COMPRESSION in the same process: every dtype and op under none, fp16 and bf16 (the inputs
  # are small integers, exact in 16 bits, so compressed results must be exact too).
  add_test(NAME allreduce_bench.compression.np3
    COMMAND ${HVD_MPIEXEC} ${HVD_MPIEXEC_FLAGS} -np 3 $<TARGET_FILE:allreduce_bench>
            -b 0 -e 5000 -f 7 -d all -o all -n 2 -w 1 --tensors 3 --compression none,fp16,bf16)
  set_tests_properties(allreduce_bench.compression.np3 PROPERTIES LABELS mpi TIMEOUT 300
    PROCESSORS 3 ENVIRONMENT "${_ab_env}")
  # The checker itself: one corrupted value on rank 0 per row must be counted (3 rows -> 3) and
  # make the run exit with status 1 (not crash, not pass).
  add_test(NAME allreduce_bench.detects_wrong.np2
    COMMAND bash -c "out=$(\"$@\" 2>&1); rc=$?; echo \"$out\"; [ $rc -eq 1 ] && echo \"$out\" | grep -q 'wrong values: hvd 3, MPI 0: FAILED'"
            detects_wrong ${HVD_MPIEXEC} ${HVD_MPIEXEC_FLAGS} -np 2 $<TARGET_FILE:allreduce_bench>
            -b 4 -e 64 -f 4 -d int32 -o sum -n 1 -w 0 --inject-wrong)
  set_tests_properties(allreduce_bench.detects_wrong.np2 PROPERTIES LABELS mpi TIMEOUT 120
    PROCESSORS 2 ENVIRONMENT "${_ab_env}")
  # Measured runs (label bench, opt-in): the figures of docs/benchmarks.md.
  add_test(NAME allreduce_bench.sweep.np2
    COMMAND ${HVD_MPIEXEC} ${HVD_MPIEXEC_FLAGS} -np 2 $<TARGET_FILE:allreduce_bench>
            -b 1K -e 64M -f 4 -d float -o sum -n 20 -w 5)
  add_test(NAME allreduce_bench.tensors1000.np2
    COMMAND ${HVD_MPIEXEC} ${HVD_MPIEXEC_FLAGS} -np 2 $<TARGET_FILE:allreduce_bench>
            -b 4K -e 4K -d float -o sum -n 100 -w 10 --tensors 1000)
  set_tests_properties(allreduce_bench.sweep.np2 allreduce_bench.tensors1000.np2 PROPERTIES
    LABELS bench TIMEOUT 900 PROCESSORS 2 RUN_SERIAL TRUE ENVIRONMENT "${_ab_env}")
endif()
