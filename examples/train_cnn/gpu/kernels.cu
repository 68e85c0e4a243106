#include "gpu/kernels.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <climits>

#include "gpu/check.h"

namespace train_cnn::gpu {
namespace {

constexpr int kThreads = 256;  // a power of two: the tree reductions below rely on it

int blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<int>(b < 65535 * 16 ? (b > 0 ? b : 1) : 65535 * 16);
}

__device__ float to_float(float x) { return x; }
__device__ float to_float(__half x) { return __half2float(x); }
__device__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
template <class T>
__device__ T from_float(float x);
template <>
__device__ float from_float<float>(float x) {
  return x;
}
template <>
__device__ __half from_float<__half>(float x) {
  return __float2half_rn(x);
}
template <>
__device__ __nv_bfloat16 from_float<__nv_bfloat16>(float x) {
  return __float2bfloat16_rn(x);
}

// T = float, __half or __nv_bfloat16: each value is computed in fp32 and rounded once to T.
template <class T>
__global__ void bias_add_kernel(T* y, const T* bias, int64_t total, int channels, int spatial) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int c = static_cast<int>((i / spatial) % channels);
    y[i] = from_float<T>(__fadd_rn(to_float(y[i]), to_float(bias[c])));
  }
}

// One block per channel, summed in fp32 in a fixed order (a tree over kThreads partial sums).
template <class T>
__global__ void bias_grad_kernel(const T* dy, T* bias_grad, int batch, int channels, int spatial) {
  __shared__ float partial[kThreads];
  const int c = blockIdx.x;
  const int64_t per_channel = int64_t{batch} * spatial;
  float sum = 0.0f;
  for (int64_t i = threadIdx.x; i < per_channel; i += kThreads) {
    const int64_t n = i / spatial, s = i % spatial;
    sum += to_float(dy[(n * channels + c) * spatial + s]);
  }
  partial[threadIdx.x] = sum;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) partial[threadIdx.x] += partial[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0) bias_grad[c] = from_float<T>(__fadd_rn(to_float(bias_grad[c]), partial[0]));
}

__global__ void cross_entropy_stats_kernel(const float* logits, const float* log_probs,
                                           const int32_t* labels, int batch, int classes,
                                           LossStats* stats) {
  __shared__ double loss[kThreads];
  __shared__ long long correct[kThreads];
  __shared__ int bad[kThreads];
  double my_loss = 0.0;
  long long my_correct = 0;
  int my_bad = INT_MAX;
  for (int n = threadIdx.x; n < batch; n += kThreads) {
    const int label = labels[n];
    if (label < 0 || label >= classes) {
      my_bad = min(my_bad, n);
      continue;
    }
    const float* z = logits + static_cast<int64_t>(n) * classes;
    int best = 0;
    for (int c = 1; c < classes; ++c) {
      if (z[c] > z[best]) best = c;
    }
    my_loss -= static_cast<double>(log_probs[static_cast<int64_t>(n) * classes + label]);
    if (best == label) ++my_correct;
  }
  loss[threadIdx.x] = my_loss;
  correct[threadIdx.x] = my_correct;
  bad[threadIdx.x] = my_bad;
  __syncthreads();
  for (int width = kThreads / 2; width > 0; width /= 2) {
    if (threadIdx.x < width) {
      loss[threadIdx.x] += loss[threadIdx.x + width];
      correct[threadIdx.x] += correct[threadIdx.x + width];
      bad[threadIdx.x] = min(bad[threadIdx.x], bad[threadIdx.x + width]);
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    stats->loss_sum = loss[0];
    stats->correct = correct[0];
    stats->bad_sample = bad[0] == INT_MAX ? -1 : bad[0];
    stats->bad_label = bad[0] == INT_MAX ? 0 : labels[bad[0]];
  }
}

__global__ void cross_entropy_backward_kernel(const float* log_probs, const int32_t* labels,
                                              int batch, int classes, float* dlogits) {
  const float scale = 1.0f / static_cast<float>(batch);
  const int64_t total = int64_t{batch} * classes;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int n = static_cast<int>(i / classes), c = static_cast<int>(i % classes);
    float d = __fmul_rn(expf(log_probs[i]), scale);
    if (labels[n] == c) d = __fsub_rn(d, scale);
    dlogits[i] = d;
  }
}

__global__ void sgd_momentum_kernel(float* params, const float* grads, float* velocity, int64_t n,
                                    float lr, float mu, float wd, bool nesterov) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const float p = params[i];
    const float g = __fadd_rn(grads[i], __fmul_rn(wd, p));
    const float v = __fadd_rn(__fmul_rn(mu, velocity[i]), g);
    velocity[i] = v;
    const float update = nesterov ? __fadd_rn(g, __fmul_rn(mu, v)) : v;
    params[i] = __fsub_rn(p, __fmul_rn(lr, update));
  }
}

// Element-wise conversion between float, __half and __nv_bfloat16: widened exactly, narrowed with
// round-to-nearest-even (the CPU emulation's rounding, model/precision.h).
template <class From, class To>
__global__ void convert_kernel(const From* in, To* out, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    out[i] = from_float<To>(to_float(in[i]));
  }
}

__global__ void round_to_half_kernel(float* x, int64_t n, bool bf16) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = bf16 ? __bfloat162float(__float2bfloat16_rn(x[i])) : __half2float(__float2half_rn(x[i]));
  }
}

template <class T>
__global__ void relu_forward_half_kernel(const T* x, T* y, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    const T v = x[i];
    const float f = to_float(v);
    y[i] = (f > 0.0f || f != f) ? v : from_float<T>(0.0f);  // NaN propagated, as cuDNN's
  }
}

template <class T>
__global__ void relu_backward_half_kernel(const T* y, const T* dy, T* dx, int64_t n) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    dx[i] = to_float(y[i]) > 0.0f ? dy[i] : from_float<T>(0.0f);
  }
}

__global__ void scale_kernel(float* x, int64_t n, float factor) {
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < n;
       i += int64_t{gridDim.x} * blockDim.x) {
    x[i] = __fmul_rn(x[i], factor);
  }
}

}  // namespace

void bias_add(float* y, const float* bias, int batch, int channels, int spatial,
              cudaStream_t stream) {
  const int64_t total = int64_t{batch} * channels * spatial;
  if (total == 0) return;
  bias_add_kernel<<<blocks_for(total), kThreads, 0, stream>>>(y, bias, total, channels, spatial);
  CNN_CUDA_CHECK(cudaGetLastError());
}

void bias_grad(const float* dy, float* bias_grad_out, int batch, int channels, int spatial,
               cudaStream_t stream) {
  if (batch == 0 || channels == 0 || spatial == 0) return;
  bias_grad_kernel<<<channels, kThreads, 0, stream>>>(dy, bias_grad_out, batch, channels, spatial);
  CNN_CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_stats(const float* logits, const float* log_probs, const int32_t* labels,
                         int batch, int classes, LossStats* stats, cudaStream_t stream) {
  cross_entropy_stats_kernel<<<1, kThreads, 0, stream>>>(logits, log_probs, labels, batch, classes,
                                                         stats);
  CNN_CUDA_CHECK(cudaGetLastError());
}

void cross_entropy_backward(const float* log_probs, const int32_t* labels, int batch, int classes,
                            float* dlogits, cudaStream_t stream) {
  const int64_t total = int64_t{batch} * classes;
  if (total == 0) return;
  cross_entropy_backward_kernel<<<blocks_for(total), kThreads, 0, stream>>>(
      log_probs, labels, batch, classes, dlogits);
  CNN_CUDA_CHECK(cudaGetLastError());
}

void sgd_momentum_step(float* params, const float* grads, float* velocity, int64_t n, float lr,
                       float momentum, float weight_decay, bool nesterov, cudaStream_t stream) {
  if (n == 0) return;
  sgd_momentum_kernel<<<blocks_for(n), kThreads, 0, stream>>>(params, grads, velocity, n, lr,
                                                              momentum, weight_decay, nesterov);
  CNN_CUDA_CHECK(cudaGetLastError());
}

void cast_float_to_half(const float* in, void* out, int64_t n, HalfFormat format,
                        cudaStream_t stream) {
  if (n == 0) return;
  if (format == HalfFormat::kFp16) {
    convert_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in, static_cast<__half*>(out), n);
  } else {
    convert_kernel<<<blocks_for(n), kThreads, 0, stream>>>(in, static_cast<__nv_bfloat16*>(out), n);
  }
  CNN_CUDA_CHECK(cudaGetLastError());
}

void cast_half_to_float(const void* in, float* out, int64_t n, HalfFormat format,
                        cudaStream_t stream) {
  if (n == 0) return;
  if (format == HalfFormat::kFp16) {
    convert_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const __half*>(in), out, n);
  } else {
    convert_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(in),
                                                           out, n);
  }
  CNN_CUDA_CHECK(cudaGetLastError());
}

void round_to_half(float* x, int64_t n, HalfFormat format, cudaStream_t stream) {
  if (n == 0) return;
  round_to_half_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, format == HalfFormat::kBf16);
  CNN_CUDA_CHECK(cudaGetLastError());
}

void bias_add_half(void* y, const void* bias, int batch, int channels, int spatial,
                   HalfFormat format, cudaStream_t stream) {
  const int64_t total = int64_t{batch} * channels * spatial;
  if (total == 0) return;
  if (format == HalfFormat::kFp16) {
    bias_add_kernel<<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<__half*>(y), static_cast<const __half*>(bias), total, channels, spatial);
  } else {
    bias_add_kernel<<<blocks_for(total), kThreads, 0, stream>>>(
        static_cast<__nv_bfloat16*>(y), static_cast<const __nv_bfloat16*>(bias), total, channels,
        spatial);
  }
  CNN_CUDA_CHECK(cudaGetLastError());
}

void bias_grad_half(const void* dy, void* bias_grad_out, int batch, int channels, int spatial,
                    HalfFormat format, cudaStream_t stream) {
  if (batch == 0 || channels == 0 || spatial == 0) return;
  if (format == HalfFormat::kFp16) {
    bias_grad_kernel<<<channels, kThreads, 0, stream>>>(static_cast<const __half*>(dy),
                                                        static_cast<__half*>(bias_grad_out), batch,
                                                        channels, spatial);
  } else {
    bias_grad_kernel<<<channels, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(dy),
                                                        static_cast<__nv_bfloat16*>(bias_grad_out),
                                                        batch, channels, spatial);
  }
  CNN_CUDA_CHECK(cudaGetLastError());
}

void relu_forward_half(const void* x, void* y, int64_t n, HalfFormat format, cudaStream_t stream) {
  if (n == 0) return;
  if (format == HalfFormat::kFp16) {
    relu_forward_half_kernel<<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const __half*>(x),
                                                                     static_cast<__half*>(y), n);
  } else {
    relu_forward_half_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(x), static_cast<__nv_bfloat16*>(y), n);
  }
  CNN_CUDA_CHECK(cudaGetLastError());
}

void relu_backward_half(const void* y, const void* dy, void* dx, int64_t n, HalfFormat format,
                        cudaStream_t stream) {
  if (n == 0) return;
  if (format == HalfFormat::kFp16) {
    relu_backward_half_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const __half*>(y), static_cast<const __half*>(dy), static_cast<__half*>(dx), n);
  } else {
    relu_backward_half_kernel<<<blocks_for(n), kThreads, 0, stream>>>(
        static_cast<const __nv_bfloat16*>(y), static_cast<const __nv_bfloat16*>(dy),
        static_cast<__nv_bfloat16*>(dx), n);
  }
  CNN_CUDA_CHECK(cudaGetLastError());
}

void scale_in_place(float* x, int64_t n, float factor, cudaStream_t stream) {
  if (n == 0) return;
  scale_kernel<<<blocks_for(n), kThreads, 0, stream>>>(x, n, factor);
  CNN_CUDA_CHECK(cudaGetLastError());
}

}  // namespace train_cnn::gpu
