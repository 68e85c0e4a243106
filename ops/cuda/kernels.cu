// Kernels of the GPU data path; see kernels.h for the contract.
//
// batched_copy: blockIdx.y walks the descriptors (grid-stride when there are more than 65535),
// blockIdx.x and the threads stride over one range's bytes. Ranges whose source and destination
// are both 16-byte aligned move as uint4 (the fusion buffer's 256-byte offsets and cudaMalloc'd
// tensors always are), then 4-byte words, then single bytes for whatever is left. One launch
// handles 1 or 500 tensors; the x dimension is sized from the largest range so that one big
// tensor still fills the GPU.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cuda/std/limits>

#include <algorithm>
#include <cstdint>

#include "hvd/error.h"
#include "ops/cuda/cuda_context.h"
#include "ops/cuda/kernels.h"

namespace hvd::ops::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void batched_copy_kernel(const CopyDescriptor* descs, int count) {
  for (int d = blockIdx.y; d < count; d += gridDim.y) {
    const CopyDescriptor c = descs[d];
    const char* src = static_cast<const char*>(c.src);
    char* dst = static_cast<char*>(c.dst);
    const int64_t n = c.bytes;
    const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const uintptr_t align = reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst);
    int64_t done = 0;
    if ((align & 15) == 0) {
      const int64_t n16 = n / 16;
      const uint4* s = reinterpret_cast<const uint4*>(src);
      uint4* t = reinterpret_cast<uint4*>(dst);
      for (int64_t i = tid; i < n16; i += stride) t[i] = s[i];
      done = n16 * 16;
    } else if ((align & 3) == 0) {
      const int64_t n4 = n / 4;
      const uint32_t* s = reinterpret_cast<const uint32_t*>(src);
      uint32_t* t = reinterpret_cast<uint32_t*>(dst);
      for (int64_t i = tid; i < n4; i += stride) t[i] = s[i];
      done = n4 * 4;
    }
    for (int64_t i = done + tid; i < n; i += stride) dst[i] = src[i];
  }
}

// Blocks for a grid-stride loop over n items: enough to fill an H100 several times over.
unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<int64_t>(b, 1, 4096));
}

template <class T>
__device__ T truncate_to(double v) {
  const double lo = static_cast<double>(::cuda::std::numeric_limits<T>::lowest());
  const double hi_excl = static_cast<double>(::cuda::std::numeric_limits<T>::max()) + 1.0;
  if (!(v == v)) return T{0};
  if (v <= lo) return ::cuda::std::numeric_limits<T>::lowest();
  if (v >= hi_excl) return ::cuda::std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

template <class T>
__global__ void scale_int_kernel(const T* src, T* dst, int64_t n, double factor) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = truncate_to<T>(static_cast<double>(src[i]) * factor);
}

template <class T, class F>
__global__ void scale_native_kernel(const T* src, T* dst, int64_t n, F factor) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = static_cast<T>(src[i] * factor);
}

__global__ void scale_half_kernel(const __half* src, __half* dst, int64_t n, float factor) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = __float2half_rn(__half2float(src[i]) * factor);
}

__global__ void scale_bf16_kernel(const __nv_bfloat16* src, __nv_bfloat16* dst, int64_t n,
                                  float factor) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = __float2bfloat16_rn(__bfloat162float(src[i]) * factor);
}

__global__ void to_half_kernel(const float* src, __half* dst, int64_t n, float factor) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = __float2half_rn(src[i] * factor);
}

__global__ void from_half_kernel(const __half* src, float* dst, int64_t n, float factor) {
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = __half2float(src[i]) * factor;
}

template <class T>
void launch_int(const void* src, void* dst, int64_t n, double factor, cudaStream_t stream) {
  scale_int_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(static_cast<const T*>(src),
                                                              static_cast<T*>(dst), n, factor);
}

}  // namespace

void batched_copy(const CopyDescriptor* descs, int count, int64_t max_bytes, cudaStream_t stream) {
  if (count <= 0 || max_bytes <= 0) return;
  // About 64 KiB per block along x (256 threads x 16 B x 16 iterations), at most 1024 blocks.
  const unsigned gx =
      static_cast<unsigned>(std::clamp<int64_t>((max_bytes + 65535) / 65536, 1, 1024));
  const unsigned gy = static_cast<unsigned>(std::min(count, 65535));
  batched_copy_kernel<<<dim3(gx, gy), kThreads, 0, stream>>>(descs, count);
  CUDA_CHECK(cudaGetLastError());
}

void scale(DataType dtype, const void* src, void* dst, int64_t n, double factor,
           cudaStream_t stream) {
  if (n <= 0) return;
  if (factor == 1.0) {
    if (src != dst)
      CUDA_CHECK(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(dtype),
                                 cudaMemcpyDeviceToDevice, stream));
    return;
  }
  const unsigned blocks = blocks_for(n);
  switch (dtype) {
    case DataType::kUInt8:
      launch_int<uint8_t>(src, dst, n, factor, stream);
      break;
    case DataType::kInt8:
      launch_int<int8_t>(src, dst, n, factor, stream);
      break;
    case DataType::kInt32:
      launch_int<int32_t>(src, dst, n, factor, stream);
      break;
    case DataType::kInt64:
      launch_int<int64_t>(src, dst, n, factor, stream);
      break;
    case DataType::kFloat16:
      scale_half_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const __half*>(src),
                                                         static_cast<__half*>(dst), n,
                                                         static_cast<float>(factor));
      break;
    case DataType::kBFloat16:
      scale_bf16_kernel<<<blocks, kThreads, 0, stream>>>(static_cast<const __nv_bfloat16*>(src),
                                                         static_cast<__nv_bfloat16*>(dst), n,
                                                         static_cast<float>(factor));
      break;
    case DataType::kFloat32: {
      const float f = static_cast<float>(factor);
      if (static_cast<double>(f) == factor)
        scale_native_kernel<float, float><<<blocks, kThreads, 0, stream>>>(
            static_cast<const float*>(src), static_cast<float*>(dst), n, f);
      else
        scale_native_kernel<float, double><<<blocks, kThreads, 0, stream>>>(
            static_cast<const float*>(src), static_cast<float*>(dst), n, factor);
      break;
    }
    case DataType::kFloat64:
      scale_native_kernel<double, double><<<blocks, kThreads, 0, stream>>>(
          static_cast<const double*>(src), static_cast<double*>(dst), n, factor);
      break;
  }
  CUDA_CHECK(cudaGetLastError());
}

void cast_to_half(const float* src, uint16_t* dst, int64_t n, double factor, cudaStream_t stream) {
  if (n <= 0) return;
  to_half_kernel<<<blocks_for(n), kThreads, 0, stream>>>(src, reinterpret_cast<__half*>(dst), n,
                                                         static_cast<float>(factor));
  CUDA_CHECK(cudaGetLastError());
}

void cast_from_half(const uint16_t* src, float* dst, int64_t n, double factor,
                    cudaStream_t stream) {
  if (n <= 0) return;
  from_half_kernel<<<blocks_for(n), kThreads, 0, stream>>>(reinterpret_cast<const __half*>(src),
                                                           dst, n, static_cast<float>(factor));
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace hvd::ops::cuda
