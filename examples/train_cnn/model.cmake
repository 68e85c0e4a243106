# train_cnn_model: the CPU layers, model, optimizer and data readers of examples/train_cnn, as a
# static library (no MPI, no hvd runtime; only the header-only hvd/error.h). Included by
# examples/train_cnn/CMakeLists.txt and, when the examples are not built, by
# tests/examples/train_cnn/CMakeLists.txt; a second include is a no-op.
#
# Needs OpenBLAS (libopenblas-dev: cblas.h, libopenblas) and zlib (zlib1g-dev). The model sets
# OpenBLAS to one thread (ModelOptions::blas_threads) for bitwise-reproducible results.
if(TARGET train_cnn_model)
  return()
endif()

set(_train_cnn_dir ${CMAKE_CURRENT_LIST_DIR})

find_package(ZLIB REQUIRED)
if(NOT TARGET ZLIB::ZLIB)
  message(FATAL_ERROR "train_cnn needs zlib: apt-get install zlib1g-dev")
endif()
get_target_property(_zlib_global ZLIB::ZLIB IMPORTED_GLOBAL)
if(NOT _zlib_global)
  # Visible to the tests in other directories that link train_cnn_model.
  set_target_properties(ZLIB::ZLIB PROPERTIES IMPORTED_GLOBAL TRUE)
endif()

# OpenBLAS::OpenBLAS from cmake/FindOpenBLAS.cmake (pkg-config's openblas, else the search paths).
find_package(OpenBLAS)
if(NOT TARGET OpenBLAS::OpenBLAS)
  message(FATAL_ERROR "train_cnn needs OpenBLAS (cblas.h and libopenblas): "
                      "apt-get install libopenblas-dev, or set OpenBLAS_ROOT")
endif()

add_library(train_cnn_model STATIC
  ${_train_cnn_dir}/model/gemm.cc
  ${_train_cnn_dir}/model/init.cc
  ${_train_cnn_dir}/model/conv2d.cc
  ${_train_cnn_dir}/model/maxpool2d.cc
  ${_train_cnn_dir}/model/relu.cc
  ${_train_cnn_dir}/model/dense.cc
  ${_train_cnn_dir}/model/softmax_cross_entropy.cc
  ${_train_cnn_dir}/model/model.cc
  ${_train_cnn_dir}/model/precision.cc
  ${_train_cnn_dir}/model/sgd_momentum.cc
  ${_train_cnn_dir}/data/dataset.cc
  ${_train_cnn_dir}/data/idx_reader.cc
  ${_train_cnn_dir}/data/synthetic.cc)
# Includes are rooted at the example ("model/model.h", "data/idx_reader.h"); hvd/error.h comes
# from the public include folder.
target_include_directories(train_cnn_model PUBLIC ${_train_cnn_dir} ${PROJECT_SOURCE_DIR}/include)
target_compile_features(train_cnn_model PUBLIC cxx_std_20)
# The elementwise loops (ReLU, pooling, im2col, SGD) only vectorise at -O3 with GCC (about 6%
# faster per image); no -ffast-math, so results stay bitwise reproducible. Only the hot files need
# it (the rest builds at the build type's level).
set_source_files_properties(
  ${_train_cnn_dir}/model/conv2d.cc ${_train_cnn_dir}/model/maxpool2d.cc
  ${_train_cnn_dir}/model/relu.cc ${_train_cnn_dir}/model/sgd_momentum.cc
  ${_train_cnn_dir}/model/precision.cc
  PROPERTIES COMPILE_OPTIONS "$<$<NOT:$<CONFIG:Debug>>:-O3>")
target_link_libraries(train_cnn_model PUBLIC OpenBLAS::OpenBLAS ZLIB::ZLIB)
if(COMMAND hvd_set_warnings)
  hvd_set_warnings(train_cnn_model)
endif()

# train_cnn_single: a single-process trainer that shows the model learns (no MPI).
include(${_train_cnn_dir}/tools/CMakeLists.txt)
