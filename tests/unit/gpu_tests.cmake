# GPU-path logic that needs no GPU: device assignment, the device fusion layout and the shard
# arithmetic of the hierarchical all-reduce. Included by tests/unit/CMakeLists.txt; label unit.
hvd_add_unit_test(test_gpu_assignment test_gpu_assignment.cc LIBS hvd_cluster)
hvd_add_unit_test(test_gpu_layout test_gpu_layout.cc LIBS hvd)
