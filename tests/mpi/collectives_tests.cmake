# Multi-rank tests of the collectives (public API only), run under mpirun with 1..4 ranks.
# Every wait is guarded by a watchdog (tests/mpi/test_collectives_util.h) that ends the job with a
# message naming the operation if it hangs, so the timeouts here are only a backstop.
hvd_add_mpi_test(test_allreduce test_allreduce.cc TIMEOUT 240)
hvd_add_mpi_test(test_collectives test_collectives.cc TIMEOUT 240)
hvd_add_mpi_test(test_async_order test_async_order.cc TIMEOUT 180)
hvd_add_mpi_test(test_join test_join.cc TIMEOUT 180)
# What each collective does while some ranks have joined, then normal operation after join().
hvd_add_mpi_test(test_join_collectives test_join_collectives.cc TIMEOUT 240)
hvd_add_mpi_test(test_errors test_errors.cc TIMEOUT 180)
target_compile_definitions(test_errors PRIVATE HVD_ERRORS_MD="${PROJECT_SOURCE_DIR}/docs/errors.md")
# Every argument check of the public API, bad on one rank only, against docs/errors.md.
hvd_add_mpi_test(test_validation test_validation.cc TIMEOUT 300)
target_compile_definitions(test_validation PRIVATE HVD_ERRORS_MD="${PROJECT_SOURCE_DIR}/docs/errors.md")
hvd_add_mpi_test(test_validation_names test_validation_names.cc TIMEOUT 180)
target_compile_definitions(test_validation_names PRIVATE HVD_ERRORS_MD="${PROJECT_SOURCE_DIR}/docs/errors.md")
hvd_add_mpi_test(test_memory test_memory.cc TIMEOUT 400)
# Needs a process in which nothing has called init() yet: its own binary.
hvd_add_mpi_test(test_before_init test_before_init.cc NP 1 2 TIMEOUT 60)
# HVD_COMPRESSION=fp16|bf16 on the CPU all-reduce: the flat path on 1..4 ranks, the hierarchical
# rings on 2 fake nodes of 2, and the bytes on the wire counted on TCP sockets (the WireBytes test
# skips itself on the default shared-memory transport).
hvd_add_mpi_test(test_compression test_compression.cc TIMEOUT 300)
add_test(NAME test_compression.np4.hierarchical
  COMMAND ${HVD_MPIEXEC} ${HVD_MPIEXEC_FLAGS} -np 4 $<TARGET_FILE:test_compression>)
set_tests_properties(test_compression.np4.hierarchical PROPERTIES LABELS mpi TIMEOUT 300 PROCESSORS 4
  ENVIRONMENT "${HVD_TEST_ROOT_ENV};HVD_HIERARCHICAL_ALLREDUCE=1;HVD_TEST_FAKE_LOCAL_SIZE=2")
foreach(np 2 3)
  add_test(NAME test_compression.np${np}.tcp_wire_bytes
    COMMAND ${HVD_MPIEXEC} ${HVD_MPIEXEC_FLAGS} -np ${np} $<TARGET_FILE:test_compression>
            --gtest_filter=*WireBytes*)
  set_tests_properties(test_compression.np${np}.tcp_wire_bytes PROPERTIES LABELS mpi TIMEOUT 180
    PROCESSORS ${np} ENVIRONMENT "${HVD_TEST_ROOT_ENV};OMPI_MCA_btl=self,tcp")
endforeach()
