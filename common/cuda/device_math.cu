// Element-wise dtype math on the device; see device_math.h for the contract. Every kernel is a
// grid-stride loop of 256-thread blocks (at most 4096 blocks: several waves on an H100).
#include "common/cuda/device_math.h"

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cuda/std/limits>

#include <algorithm>
#include <string>
#include <type_traits>

#include "hvd/error.h"

namespace hvd::device_math {
namespace {

constexpr int kThreads = 256;

unsigned blocks_for(int64_t n) {
  const int64_t b = (n + kThreads - 1) / kThreads;
  return static_cast<unsigned>(std::clamp<int64_t>(b, 1, 4096));
}

#define HVD_GRID_STRIDE(i, n)                                                            \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// The 16-bit float types and their conversions, by hvd dtype.
template <class T>
struct Half;
template <>
struct Half<__half> {
  __device__ static float to_float(__half v) { return __half2float(v); }
  __device__ static __half from_float(float v) { return __float2half_rn(v); }
};
template <>
struct Half<__nv_bfloat16> {
  __device__ static float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
  __device__ static __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }
};

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
  HVD_GRID_STRIDE(i, n) dst[i] = truncate_to<T>(static_cast<double>(src[i]) * factor);
}

template <class T, class F>
__global__ void scale_native_kernel(const T* src, T* dst, int64_t n, F factor) {
  HVD_GRID_STRIDE(i, n) dst[i] = static_cast<T>(src[i] * factor);
}

template <class H>
__global__ void scale_half_kernel(const H* src, H* dst, int64_t n, float factor) {
  HVD_GRID_STRIDE(i, n) dst[i] = Half<H>::from_float(Half<H>::to_float(src[i]) * factor);
}

template <class H>
__global__ void to_half_kernel(const float* src, H* dst, int64_t n, float factor) {
  HVD_GRID_STRIDE(i, n) dst[i] = Half<H>::from_float(src[i] * factor);
}

template <class H>
__global__ void from_half_kernel(const H* src, float* dst, int64_t n, float factor) {
  HVD_GRID_STRIDE(i, n) dst[i] = Half<H>::to_float(src[i]) * factor;
}

// Integers through their unsigned type: wraps, as the CPU's reduce_buffers.
template <class T>
__global__ void accumulate_int_kernel(const T* src, T* dst, int64_t n) {
  using U = std::make_unsigned_t<T>;
  HVD_GRID_STRIDE(i, n) dst[i] = static_cast<T>(static_cast<U>(dst[i]) + static_cast<U>(src[i]));
}

template <class T>
__global__ void accumulate_native_kernel(const T* src, T* dst, int64_t n) {
  HVD_GRID_STRIDE(i, n) dst[i] += src[i];
}

template <class H>
__global__ void accumulate_half_kernel(const H* src, H* dst, int64_t n) {
  HVD_GRID_STRIDE(i, n) {
    dst[i] = Half<H>::from_float(Half<H>::to_float(dst[i]) + Half<H>::to_float(src[i]));
  }
}

// A non-finite result sets the flag; the stores race only with stores of the same value.
template <class T, class F>
__global__ void scale_and_check_native_kernel(T* x, int64_t n, F factor, int32_t* flag) {
  bool bad = false;
  HVD_GRID_STRIDE(i, n) {
    const T v = static_cast<T>(x[i] * factor);
    x[i] = v;
    bad |= !isfinite(v);
  }
  if (bad) *flag = 1;
}

template <class H>
__global__ void scale_and_check_half_kernel(H* x, int64_t n, float factor, int32_t* flag) {
  bool bad = false;
  HVD_GRID_STRIDE(i, n) {
    const H v = Half<H>::from_float(Half<H>::to_float(x[i]) * factor);
    x[i] = v;
    bad |= !isfinite(Half<H>::to_float(v));
  }
  if (bad) *flag = 1;
}

void check_launch() { check_cuda(cudaGetLastError(), "a device_math kernel launch"); }

bool is_half(DataType t) { return t == DataType::kFloat16 || t == DataType::kBFloat16; }

template <class T>
constexpr bool kHalf = std::is_same_v<T, __half> || std::is_same_v<T, __nv_bfloat16>;

// f(static_cast<T*>(nullptr)) with T the device type of dtype (__half, __nv_bfloat16 for the
// 16-bit floats).
template <class F>
void visit(DataType dtype, F&& f) {
  switch (dtype) {
    case DataType::kUInt8:
      return f(static_cast<uint8_t*>(nullptr));
    case DataType::kInt8:
      return f(static_cast<int8_t*>(nullptr));
    case DataType::kInt32:
      return f(static_cast<int32_t*>(nullptr));
    case DataType::kInt64:
      return f(static_cast<int64_t*>(nullptr));
    case DataType::kFloat16:
      return f(static_cast<__half*>(nullptr));
    case DataType::kBFloat16:
      return f(static_cast<__nv_bfloat16*>(nullptr));
    case DataType::kFloat32:
      return f(static_cast<float*>(nullptr));
    case DataType::kFloat64:
      return f(static_cast<double*>(nullptr));
  }
}

}  // namespace

void check_cuda(cudaError_t rc, const char* call) {
  if (rc == cudaSuccess) return;
  throw Error(std::string(call) + " failed: " + cudaGetErrorName(rc) + " (" +
              cudaGetErrorString(rc) + ")");
}

void scale(DataType dtype, const void* src, void* dst, int64_t n, double factor,
           cudaStream_t stream) {
  if (n <= 0) return;
  if (factor == 1.0) {
    if (src != dst)
      check_cuda(cudaMemcpyAsync(dst, src, static_cast<size_t>(n) * dtype_size(dtype),
                                 cudaMemcpyDeviceToDevice, stream),
                 "cudaMemcpyAsync (device_math::scale)");
    return;
  }
  const unsigned b = blocks_for(n);
  visit(dtype, [&]<class T>(T*) {
    const T* in = static_cast<const T*>(src);
    T* out = static_cast<T*>(dst);
    const float f = static_cast<float>(factor);
    if constexpr (std::is_integral_v<T>)
      scale_int_kernel<T><<<b, kThreads, 0, stream>>>(in, out, n, factor);
    else if constexpr (kHalf<T>)
      scale_half_kernel<T><<<b, kThreads, 0, stream>>>(in, out, n, f);
    else if constexpr (std::is_same_v<T, float>) {
      if (static_cast<double>(f) == factor)  // float in float when the factor is exact in float
        scale_native_kernel<float, float><<<b, kThreads, 0, stream>>>(in, out, n, f);
      else
        scale_native_kernel<float, double><<<b, kThreads, 0, stream>>>(in, out, n, factor);
    } else {
      scale_native_kernel<double, double><<<b, kThreads, 0, stream>>>(in, out, n, factor);
    }
  });
  check_launch();
}

void cast(DataType from, DataType to, const void* src, void* dst, int64_t n, double factor,
          cudaStream_t stream) {
  if (from == to) return scale(from, src, dst, n, factor, stream);
  const bool down = from == DataType::kFloat32 && is_half(to);
  const bool up = is_half(from) && to == DataType::kFloat32;
  if (!down && !up)
    throw InvalidArgumentError(std::string("device_math::cast: no conversion from ") +
                               dtype_name(from) + " to " + dtype_name(to) +
                               " (float32 to and from float16 or bfloat16 only).");
  if (n <= 0) return;
  const unsigned b = blocks_for(n);
  const float f = static_cast<float>(factor);
  visit(down ? to : from, [&]<class H>(H*) {
    if constexpr (kHalf<H>) {
      if (down)
        to_half_kernel<H><<<b, kThreads, 0, stream>>>(static_cast<const float*>(src),
                                                      static_cast<H*>(dst), n, f);
      else
        from_half_kernel<H><<<b, kThreads, 0, stream>>>(static_cast<const H*>(src),
                                                        static_cast<float*>(dst), n, f);
    }
  });
  check_launch();
}

void accumulate(DataType dtype, const void* src, void* dst, int64_t n, cudaStream_t stream) {
  if (n <= 0) return;
  const unsigned b = blocks_for(n);
  visit(dtype, [&]<class T>(T*) {
    const T* in = static_cast<const T*>(src);
    T* out = static_cast<T*>(dst);
    if constexpr (std::is_integral_v<T>)
      accumulate_int_kernel<T><<<b, kThreads, 0, stream>>>(in, out, n);
    else if constexpr (kHalf<T>)
      accumulate_half_kernel<T><<<b, kThreads, 0, stream>>>(in, out, n);
    else
      accumulate_native_kernel<T><<<b, kThreads, 0, stream>>>(in, out, n);
  });
  check_launch();
}

void scale_and_check(DataType dtype, void* x, int64_t n, double factor, int32_t* flag,
                     cudaStream_t stream) {
  if (n <= 0) return;
  if (!is_half(dtype) && dtype != DataType::kFloat32 && dtype != DataType::kFloat64)
    throw InvalidArgumentError(std::string("device_math::scale_and_check: dtype ") +
                               dtype_name(dtype) +
                               " (float16, bfloat16, float32 or float64 only).");
  const unsigned b = blocks_for(n);
  visit(dtype, [&]<class T>(T*) {
    T* data = static_cast<T*>(x);
    if constexpr (kHalf<T>)
      scale_and_check_half_kernel<T>
          <<<b, kThreads, 0, stream>>>(data, n, static_cast<float>(factor), flag);
    else if constexpr (std::is_same_v<T, float>)
      scale_and_check_native_kernel<float, float>
          <<<b, kThreads, 0, stream>>>(data, n, static_cast<float>(factor), flag);
    else if constexpr (std::is_same_v<T, double>)
      scale_and_check_native_kernel<double, double>
          <<<b, kThreads, 0, stream>>>(data, n, factor, flag);
  });
  check_launch();
}

}  // namespace hvd::device_math
