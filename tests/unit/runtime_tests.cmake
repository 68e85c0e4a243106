hvd_add_unit_test(test_fusion_plan test_fusion_plan.cc LIBS hvd)
hvd_add_unit_test(test_response_cache test_response_cache.cc LIBS hvd)
hvd_add_unit_test(test_message test_message.cc LIBS hvd)
hvd_add_unit_test(test_stall_inspector test_stall_inspector.cc LIBS hvd MPI::MPI_C)
# docs/errors.md as the messages' specification: well-formed templates, no repeated prefix, the GPU
# device messages as reported (tests/unit/error_catalogue.h; tests/mpi/test_validation.cc matches the rest).
hvd_add_unit_test(test_error_catalogue test_error_catalogue.cc LIBS hvd_cluster)
target_compile_definitions(test_error_catalogue PRIVATE HVD_ERRORS_MD="${PROJECT_SOURCE_DIR}/docs/errors.md")
