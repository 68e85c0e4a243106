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
hvd_add_mpi_test(test_memory test_memory.cc TIMEOUT 400)
# Needs a process in which nothing has called init() yet: its own binary.
hvd_add_mpi_test(test_before_init test_before_init.cc NP 1 2 TIMEOUT 60)
