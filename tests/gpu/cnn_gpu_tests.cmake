# GPU tests of the train_cnn model (label gpu): the cuDNN/cuBLAS layers and model
# (examples/train_cnn/gpu, target train_cnn_gpu) against the CPU layers and model. Included by
# tests/gpu/CMakeLists.txt after its `if(NOT HVD_HAVE_CUDA) return()` and enable_language(CUDA).
# The binary has its own main (no MPI, no hvd runtime): without a visible device it prints why and
# exits 77, which ctest reports as skipped.
if(NOT HVD_HAVE_CUDNN)
  return()
endif()
if(NOT TARGET train_cnn_gpu)
  include(${PROJECT_SOURCE_DIR}/examples/train_cnn/gpu/gpu.cmake)
endif()
add_executable(test_cnn_cudnn ${CMAKE_CURRENT_LIST_DIR}/test_cnn_cudnn.cc)
target_link_libraries(test_cnn_cudnn PRIVATE train_cnn_gpu GTest::gtest)
if(COMMAND hvd_set_warnings)
  hvd_set_warnings(test_cnn_cudnn)
endif()
add_test(NAME test_cnn_cudnn COMMAND test_cnn_cudnn)
set_tests_properties(test_cnn_cudnn PROPERTIES LABELS gpu TIMEOUT 300 SKIP_RETURN_CODE 77)
