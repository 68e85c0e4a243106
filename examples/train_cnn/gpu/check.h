#pragma once

// Checks for every CUDA, cuDNN and cuBLAS call of the GPU model. A failure throws hvd::Error whose
// message names the call as written, the library's own error name and string, and file:line, e.g.
//   cudnnConvolutionForward(...) failed: CUDNN_STATUS_BAD_PARAM (...) at gpu/conv2d.cc:120
// Kernel launches are checked with CNN_CUDA_CHECK(cudaGetLastError()) right after the launch; an
// error during execution surfaces at the next synchronising call, which is checked as well.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <string>

#include "hvd/error.h"

namespace train_cnn::gpu {

[[noreturn]] inline void throw_gpu_error(const char* call, const std::string& what,
                                         const char* file, int line) {
  throw hvd::Error(
      std::string(call) + " failed: " + what + " at " + file + ":" + std::to_string(line) +
      ". Check that the device is healthy (nvidia-smi), that the CUDA, cuDNN and "
      "cuBLAS libraries match the ones train_cnn was built with, and that enough device "
      "memory is free.");
}

inline std::string cuda_error_text(cudaError_t rc) {
  return std::string(cudaGetErrorName(rc)) + " (" + cudaGetErrorString(rc) + ")";
}

inline std::string cudnn_error_text(cudnnStatus_t rc) {
  return std::string(cudnnGetErrorString(rc)) + " (cuDNN " + std::to_string(cudnnGetVersion()) +
         ")";
}

inline std::string cublas_error_text(cublasStatus_t rc) {
  return std::string(cublasGetStatusName(rc)) + " (" + cublasGetStatusString(rc) + ")";
}

}  // namespace train_cnn::gpu

#define CNN_CUDA_CHECK(call)                                                               \
  do {                                                                                     \
    const cudaError_t cnn_rc_ = (call);                                                    \
    if (cnn_rc_ != cudaSuccess)                                                            \
      ::train_cnn::gpu::throw_gpu_error(#call, ::train_cnn::gpu::cuda_error_text(cnn_rc_), \
                                        __FILE__, __LINE__);                               \
  } while (0)

#define CNN_CUDNN_CHECK(call)                                                               \
  do {                                                                                      \
    const cudnnStatus_t cnn_rc_ = (call);                                                   \
    if (cnn_rc_ != CUDNN_STATUS_SUCCESS)                                                    \
      ::train_cnn::gpu::throw_gpu_error(#call, ::train_cnn::gpu::cudnn_error_text(cnn_rc_), \
                                        __FILE__, __LINE__);                                \
  } while (0)

#define CNN_CUBLAS_CHECK(call)                                                               \
  do {                                                                                       \
    const cublasStatus_t cnn_rc_ = (call);                                                   \
    if (cnn_rc_ != CUBLAS_STATUS_SUCCESS)                                                    \
      ::train_cnn::gpu::throw_gpu_error(#call, ::train_cnn::gpu::cublas_error_text(cnn_rc_), \
                                        __FILE__, __LINE__);                                 \
  } while (0)
