# train_cnn_gpu: the GPU model of examples/train_cnn (cuDNN convolution, pooling, activation and
# softmax; cuBLAS dense layers; kernels for bias, loss statistics and SGD), as a static library.
# Defined only when HvdCuda.cmake found the GPU stack with cuDNN (HVD_HAVE_CUDNN); a CPU-only build
# (-DHVD_WITH_CUDA=OFF) compiles nothing here. Included (not add_subdirectory) by
# examples/train_cnn/CMakeLists.txt and, when the examples are not built, by
# tests/gpu/CMakeLists.txt; a second include is a no-op.
#
# Enables CUDA in the including directory: an executable that links train_cnn_gpu is linked by the
# CUDA toolchain (CMake propagates the CUDA link language of a static library with .cu sources),
# so it must be defined in a directory where CUDA is enabled, e.g. the one that includes this.
if(NOT HVD_HAVE_CUDNN OR TARGET train_cnn_gpu)
  return()
endif()

set(_train_cnn_gpu_dir ${CMAKE_CURRENT_LIST_DIR})
include(${_train_cnn_gpu_dir}/../model.cmake)  # train_cnn_model (no-op when already defined)
enable_language(CUDA)

add_library(train_cnn_gpu STATIC
  ${_train_cnn_gpu_dir}/context.cc
  ${_train_cnn_gpu_dir}/conv2d.cc
  ${_train_cnn_gpu_dir}/maxpool2d.cc
  ${_train_cnn_gpu_dir}/relu.cc
  ${_train_cnn_gpu_dir}/dense.cc
  ${_train_cnn_gpu_dir}/softmax_cross_entropy.cc
  ${_train_cnn_gpu_dir}/sgd_momentum.cc
  ${_train_cnn_gpu_dir}/cudnn_model.cc
  ${_train_cnn_gpu_dir}/kernels.cu)
# Includes rooted at the example, as the CPU model: "gpu/cudnn_model.h", "model/model.h".
target_include_directories(train_cnn_gpu PUBLIC ${_train_cnn_gpu_dir}/..)
# No relocatable device code (no device link step); the C++ files are host code compiled by the
# C++ compiler against the CUDA, cuDNN and cuBLAS headers.
set_target_properties(train_cnn_gpu PROPERTIES
  CUDA_ARCHITECTURES "${HVD_CUDA_ARCHITECTURES}"
  CUDA_STANDARD 17
  CUDA_STANDARD_REQUIRED ON
  CUDA_RUNTIME_LIBRARY Shared
  POSITION_INDEPENDENT_CODE ON)
target_link_libraries(train_cnn_gpu PUBLIC train_cnn_model CUDA::cudart CUDA::cublas hvd::cudnn)
target_compile_options(train_cnn_gpu PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)
if(COMMAND hvd_set_warnings)
  hvd_set_warnings(train_cnn_gpu)
endif()
