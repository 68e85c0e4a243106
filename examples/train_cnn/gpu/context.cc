#include "gpu/context.h"

#include <string>

#include "hvd/error.h"

namespace train_cnn::gpu {

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" status for later calls
    return 0;
  }
  return n;
}

CudaContext::CudaContext(const GpuOptions& options) : options_(options) {
  const int devices = device_count();
  if (options_.device < 0 || options_.device >= devices) {
    throw hvd::InvalidArgumentError(
        "train_cnn GPU model: CUDA device " + std::to_string(options_.device) + " requested, " +
        std::to_string(devices) + " visible. Pick a device in 0.." +
        std::to_string(devices > 0 ? devices - 1 : 0) +
        " (CUDA_VISIBLE_DEVICES limits the list), or use --device cpu.");
  }
  CNN_CUDA_CHECK(cudaSetDevice(options_.device));
  // Non-blocking: the legacy default stream (used by other libraries) does not serialise with it.
  CNN_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  try {
    CNN_CUDNN_CHECK(cudnnCreate(&cudnn_));
    CNN_CUDNN_CHECK(cudnnSetStream(cudnn_, stream_));
    CNN_CUBLAS_CHECK(cublasCreate(&cublas_));
    CNN_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
    // Scalars (alpha, beta) are host values.
    CNN_CUBLAS_CHECK(cublasSetPointerMode(cublas_, CUBLAS_POINTER_MODE_HOST));
    CNN_CUBLAS_CHECK(cublasSetMathMode(
        cublas_, options_.allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH));
  } catch (...) {
    if (cublas_ != nullptr) cublasDestroy(cublas_);
    if (cudnn_ != nullptr) cudnnDestroy(cudnn_);
    cudaStreamDestroy(stream_);
    throw;
  }
}

CudaContext::~CudaContext() {
  cudaSetDevice(options_.device);
  cudaStreamSynchronize(stream_);
  cublasDestroy(cublas_);
  cudnnDestroy(cudnn_);
  cudaStreamDestroy(stream_);
}

cudnnMathType_t CudaContext::conv_math_type() const {
  return options_.allow_tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

void CudaContext::set_fp32_reductions() {
  const cublasMath_t base = options_.allow_tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH;
  CNN_CUBLAS_CHECK(cublasSetMathMode(
      cublas_, static_cast<cublasMath_t>(base | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)));
}

void CudaContext::activate() const {
  int current = -1;
  CNN_CUDA_CHECK(cudaGetDevice(&current));
  if (current != options_.device) CNN_CUDA_CHECK(cudaSetDevice(options_.device));
}

void* CudaContext::workspace(size_t bytes) {
  if (bytes > workspace_.size()) {
    synchronize();
    workspace_.resize(bytes);
  }
  return workspace_.data();
}

void CudaContext::synchronize() const { CNN_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

}  // namespace train_cnn::gpu
