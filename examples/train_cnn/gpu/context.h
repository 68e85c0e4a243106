#pragma once

// What the cuDNN/cuBLAS layers of one model share on its one device: the stream every kernel,
// library call and copy of the model is queued on, a cuDNN and a cuBLAS handle bound to that
// stream, the math mode, and one convolution workspace.
//
// Ordering: everything the model does is queued on stream() in program order, so a layer may read
// what the previous layer wrote without any synchronisation; the host waits only where a result
// must come back (loss, copies to the host). A data-parallel trainer passes stream() with each
// gradient to hvd, which orders its all-reduce after the producing kernels with an event.
//
// The constructor makes options.device current on the calling thread; activate() does so again
// (a no-op when it already is). Not thread-safe: one context per thread, like the CPU model.

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>

#include "gpu/device_buffer.h"

namespace train_cnn::gpu {

enum class ConvAlgorithms {
  // cuDNN's heuristics (cudnnGetConvolution*Algorithm_v7), restricted to deterministic algorithms
  // that fit kMaxWorkspaceBytes; kFixed when none qualifies.
  kHeuristic,
  // IMPLICIT_PRECOMP_GEMM forward, BWD_DATA_ALGO_1, BWD_FILTER_ALGO_1: deterministic, supported
  // for every shape of this network, small workspace.
  kFixed,
};

struct GpuOptions {
  int device = 0;  // CUDA device index as the process sees it (after CUDA_VISIBLE_DEVICES)
  // TF32 tensor cores for the convolutions and GEMMs (about 1e-3 relative error, as PyTorch's
  // default for cuDNN convolutions on Ampere and later). Off: FP32 FMA math, which agrees with the
  // CPU model to about 1e-5.
  bool allow_tf32 = false;
  ConvAlgorithms conv_algorithms = ConvAlgorithms::kHeuristic;
};

class CudaContext {
 public:
  static constexpr size_t kMaxWorkspaceBytes = size_t{256} << 20;

  explicit CudaContext(const GpuOptions& options = {});
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  const GpuOptions& options() const { return options_; }
  int device() const { return options_.device; }
  cudaStream_t stream() const { return stream_; }
  cudnnHandle_t cudnn() const { return cudnn_; }
  cublasHandle_t cublas() const { return cublas_; }
  // The math type float32 convolution descriptors get: CUDNN_FMA_MATH, or CUDNN_DEFAULT_MATH with
  // TF32 (16-bit convolutions use CUDNN_TENSOR_OP_MATH, gpu/conv2d.h).
  cudnnMathType_t conv_math_type() const;
  // For a model with 16-bit GEMMs (--precision bf16|fp16): adds
  // CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION to the cuBLAS math mode, so that a split-K
  // GEMM with 16-bit output sums its partial results in float and rounds once, as the CPU emulation
  // does. Float32 GEMMs are not affected; an fp32 model never calls it.
  void set_fp32_reductions();

  void activate() const;

  // A workspace of at least `bytes`, valid until the next call with a larger size. Growing waits
  // for the stream first (work queued earlier may still use the old workspace).
  void* workspace(size_t bytes);

  // Waits for everything queued on stream().
  void synchronize() const;

 private:
  GpuOptions options_;
  cudaStream_t stream_ = nullptr;
  cudnnHandle_t cudnn_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  DeviceArray<unsigned char> workspace_;
};

// The number of CUDA devices this process sees; 0 when there is no driver or no device (never
// throws), so callers can pick the CPU path.
int device_count();

}  // namespace train_cnn::gpu
