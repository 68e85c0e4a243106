# Tests of the train_cnn CPU model pieces (examples/train_cnn/model, data). The library target
# comes from examples/train_cnn/model.cmake; include it here when the examples are not built.
if(NOT TARGET train_cnn_model)
  include(${PROJECT_SOURCE_DIR}/examples/train_cnn/model.cmake)
endif()
hvd_add_unit_test(test_cnn_layers test_cnn_layers.cc LIBS train_cnn_model)
hvd_add_unit_test(test_cnn_model test_cnn_model.cc LIBS train_cnn_model)
hvd_add_unit_test(test_cnn_data test_cnn_data.cc LIBS train_cnn_model)
