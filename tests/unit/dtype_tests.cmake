# ops/dtype_math: compiled straight into the test (no MPI, no library needed).
hvd_add_unit_test(test_dtype_math test_dtype_math.cc ${PROJECT_SOURCE_DIR}/ops/dtype_math.cc)
target_include_directories(test_dtype_math PRIVATE ${PROJECT_SOURCE_DIR}/include ${PROJECT_SOURCE_DIR})
