# GPU data path and the hierarchical all-reduce. Included by ops/CMakeLists.txt.
#
# The hierarchical all-reduce over MPI is CPU code: always built. gpu_backend.cc is always built too
# and compiles its CUDA half only when HVD_HAVE_CUDA. Everything that includes a CUDA or
# NCCL header is built only when HvdCuda.cmake found the GPU stack (HVD_HAVE_CUDA), so a CPU-only
# build (-DHVD_WITH_CUDA=OFF) compiles no CUDA at all.
target_sources(hvd PRIVATE
  gpu_backend.cc              # the runtime's one entry point; builds nothing CUDA without CUDA
  hierarchical/allreduce.cc)

if(HVD_HAVE_CUDA)
  enable_language(CUDA)
  # CMake 3.25 predates nvcc's C++20 support (CUDA 12+) and knows no flag for it; hvd/tensor.h
  # needs C++20, as the rest of hvd. Teach this directory the flag when CMake does not know it.
  if(NOT CMAKE_CUDA20_STANDARD_COMPILE_OPTION AND CMAKE_CUDA_COMPILER_VERSION VERSION_GREATER_EQUAL 12.0)
    set(CMAKE_CUDA20_STANDARD_COMPILE_OPTION "-std=c++20")
    set(CMAKE_CUDA20_EXTENSION_COMPILE_OPTION "-std=c++20")
  endif()
  # The kernels: a static library of this directory (where CUDA is enabled), linked into hvd. No
  # relocatable device code, so no device link step; sm_90 code and PTX by default
  # (HVD_CUDA_ARCHITECTURES).
  add_library(hvd_cuda_kernels STATIC cuda/kernels.cu)
  set_target_properties(hvd_cuda_kernels PROPERTIES
    CUDA_ARCHITECTURES "${HVD_CUDA_ARCHITECTURES}"
    CUDA_STANDARD 20
    CUDA_STANDARD_REQUIRED ON
    CUDA_RUNTIME_LIBRARY Shared
    POSITION_INDEPENDENT_CODE ON)
  target_include_directories(hvd_cuda_kernels PRIVATE
    ${PROJECT_SOURCE_DIR} ${PROJECT_SOURCE_DIR}/include ${PROJECT_BINARY_DIR}/generated)
  target_link_libraries(hvd_cuda_kernels PRIVATE CUDA::cudart)
  target_compile_options(hvd_cuda_kernels PRIVATE $<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra>)

  target_sources(hvd PRIVATE
    cuda/cuda_context.cc
    cuda/finalizer.cc
    nccl/nccl_context.cc
    nccl/allreduce.cc
    nccl/allgather.cc
    nccl/broadcast.cc
    nccl/alltoall.cc
    nccl/reducescatter.cc
    mpi/staged.cc
    hierarchical/nccl_allreduce.cc)
  target_link_libraries(hvd PRIVATE hvd_cuda_kernels CUDA::cudart hvd::nccl)
endif()
