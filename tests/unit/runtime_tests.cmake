hvd_add_unit_test(test_fusion_plan test_fusion_plan.cc LIBS hvd)
hvd_add_unit_test(test_response_cache test_response_cache.cc LIBS hvd)
hvd_add_unit_test(test_message test_message.cc LIBS hvd)
hvd_add_unit_test(test_stall_inspector test_stall_inspector.cc LIBS hvd MPI::MPI_C)
