# GPU assignment (which CUDA device this process uses): a pure function, no CUDA needed, so it is
# built in every configuration and unit-tested on the CPU. Included by cluster/CMakeLists.txt.
target_sources(hvd_cluster PRIVATE gpu_assignment.cc)
