# GPU benchmarks (not ctest tests: scripts/gpu-check runs them and reads their --csv output).
# Included by tests/gpu/CMakeLists.txt after its `if(NOT HVD_HAVE_CUDA) return()`. Each prints
# "SKIPPED: ..." and exits 77 without a CUDA device.
#   gpu_pack_bench        batched pack/unpack kernel vs cudaMemcpyAsync D2D of the same bytes
#   gpu_allreduce_bench   hvd allreduce of CUDA tensors vs raw ncclAllReduce (--baseline nccl) or
#                         vs raw D2H + MPI_Allreduce + H2D (--baseline staged); --vary VAR=a,b
#                         measures hvd once per value (fused vs unfused, cycle times)
add_executable(gpu_pack_bench ${CMAKE_CURRENT_LIST_DIR}/gpu_pack_bench.cc)
target_link_libraries(gpu_pack_bench PRIVATE hvd CUDA::cudart)
target_include_directories(gpu_pack_bench PRIVATE ${PROJECT_SOURCE_DIR})
hvd_set_warnings(gpu_pack_bench)

add_executable(gpu_allreduce_bench ${CMAKE_CURRENT_LIST_DIR}/gpu_allreduce_bench.cc)
target_link_libraries(gpu_allreduce_bench PRIVATE hvd MPI::MPI_C CUDA::cudart hvd::nccl)
target_include_directories(gpu_allreduce_bench PRIVATE ${PROJECT_SOURCE_DIR})
hvd_set_warnings(gpu_allreduce_bench)
