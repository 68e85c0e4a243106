#include "ops/dtype_math.h"

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

// Why the loops look the way they do: the library is built with -O2, where GCC 12 only vectorises
// a loop whose trip count is a known multiple of the vector width ("very-cheap" cost model), and
// never versions a loop for possible aliasing. So each hot loop runs over fixed blocks of kBlock
// elements through __restrict pointers (the block is unrolled and vectorised as a straight line)
// and finishes the remainder with a scalar loop. This keeps the float32 sum and scale passes over a
// 64 MiB fusion buffer memory-bound instead of compute-bound, without any compiler flag.
//
// fp16/bf16 arithmetic is done in float and rounded once to the 16-bit format. For +, -, * and /
// that is correctly rounded, because float carries at least 2p+2 bits of a p-bit format (24 >= 2*11+2
// for fp16, 24 >= 2*8+2 for bf16), so the double rounding cannot go wrong.

namespace hvd::ops {
namespace {

constexpr std::size_t kBlock = 16;

// The elements of `dtype` in bytes; local so that this file does not need the library's
// hvd::dtype_size (the unit test compiles this file on its own).
std::size_t element_size(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
    case DataType::kInt8: return 1;
    case DataType::kFloat16:
    case DataType::kBFloat16: return 2;
    case DataType::kInt32:
    case DataType::kFloat32: return 4;
    case DataType::kInt64:
    case DataType::kFloat64: return 8;
  }
  return 1;
}

// --- element-wise operations -------------------------------------------------------------------
// Integers wrap around (two's complement) on overflow, as MPI implementations do in practice; the
// arithmetic is done in the unsigned type so that it is defined behaviour.
template <class T>
inline T wrap_add(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(static_cast<U>(static_cast<U>(a) + static_cast<U>(b)));
  } else {
    return a + b;
  }
}

template <class T>
inline T wrap_mul(T a, T b) {
  if constexpr (std::is_integral_v<T>) {
    // unsigned char/short promote to int, whose product can overflow: multiply in unsigned int.
    using U = std::conditional_t<(sizeof(T) < sizeof(unsigned)), unsigned, std::make_unsigned_t<T>>;
    return static_cast<T>(static_cast<U>(a) * static_cast<U>(b));
  } else {
    return a * b;
  }
}

// Floating min/max propagate NaN (a NaN gradient on any rank stays visible), like torch.minimum.
template <class T>
inline T min_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return (b < a || b != b) ? b : a;
  else return b < a ? b : a;
}

template <class T>
inline T max_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) return (b > a || b != b) ? b : a;
  else return b > a ? b : a;
}

struct SumFn {
  template <class T>
  T operator()(T a, T b) const { return wrap_add(a, b); }
};
struct ProductFn {
  template <class T>
  T operator()(T a, T b) const { return wrap_mul(a, b); }
};
struct MinFn {
  template <class T>
  T operator()(T a, T b) const { return min_of(a, b); }
};
struct MaxFn {
  template <class T>
  T operator()(T a, T b) const { return max_of(a, b); }
};

// inout[i] = fn(inout[i], in[i]). `in` and `inout` must not partially overlap (equal is fine: each
// block loads before it stores).
template <class T, class Fn>
void reduce_native(const T* __restrict in, T* __restrict inout, std::size_t n, Fn fn) {
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (std::size_t j = 0; j < kBlock; ++j) inout[i + j] = fn(inout[i + j], in[i + j]);
  }
  for (; i < n; ++i) inout[i] = fn(inout[i], in[i]);
}

// The same for 16-bit floats: widen to float, apply, round back to nearest even.
template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float), class Fn>
void reduce_16(const uint16_t* in, uint16_t* inout, std::size_t n, Fn fn) {
  for (std::size_t i = 0; i < n; ++i) inout[i] = FromFloat(fn(ToFloat(inout[i]), ToFloat(in[i])));
}

template <class Fn>
void reduce_typed(DataType dtype, const void* in, void* inout, std::size_t n, Fn fn) {
  switch (dtype) {
    case DataType::kUInt8:
      return reduce_native(static_cast<const uint8_t*>(in), static_cast<uint8_t*>(inout), n, fn);
    case DataType::kInt8:
      return reduce_native(static_cast<const int8_t*>(in), static_cast<int8_t*>(inout), n, fn);
    case DataType::kInt32:
      return reduce_native(static_cast<const int32_t*>(in), static_cast<int32_t*>(inout), n, fn);
    case DataType::kInt64:
      return reduce_native(static_cast<const int64_t*>(in), static_cast<int64_t*>(inout), n, fn);
    case DataType::kFloat32:
      return reduce_native(static_cast<const float*>(in), static_cast<float*>(inout), n, fn);
    case DataType::kFloat64:
      return reduce_native(static_cast<const double*>(in), static_cast<double*>(inout), n, fn);
    case DataType::kFloat16:
      return reduce_16<half_to_float, float_to_half>(static_cast<const uint16_t*>(in),
                                                      static_cast<uint16_t*>(inout), n, fn);
    case DataType::kBFloat16:
      return reduce_16<bfloat16_to_float, float_to_bfloat16>(static_cast<const uint16_t*>(in),
                                                              static_cast<uint16_t*>(inout), n, fn);
  }
}

// --- scaling -------------------------------------------------------------------------------------
// double -> integer T, truncated toward zero, saturated at T's range (NaN becomes 0) so that an
// out-of-range product is never undefined behaviour.
template <class T>
inline T truncate_to(double v) {
  constexpr double lo = static_cast<double>(std::numeric_limits<T>::lowest());
  // max + 1 is a power of two, exact in double (int64's max rounds up to it already).
  constexpr double hi_excl = static_cast<double>(std::numeric_limits<T>::max()) + 1.0;
  if (!(v == v)) return T{0};
  if (v <= lo) return std::numeric_limits<T>::lowest();
  if (v >= hi_excl) return std::numeric_limits<T>::max();
  return static_cast<T>(v);
}

template <class T>
void scale_int(const T* src, T* dst, std::size_t n, double factor) {
  for (std::size_t i = 0; i < n; ++i) dst[i] = truncate_to<T>(static_cast<double>(src[i]) * factor);
}

// src == dst is allowed: each block loads before it stores.
template <class T, class F>
void scale_native(const T* __restrict src, T* __restrict dst, std::size_t n, F factor) {
  std::size_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    for (std::size_t j = 0; j < kBlock; ++j) dst[i + j] = static_cast<T>(src[i + j] * factor);
  }
  for (; i < n; ++i) dst[i] = static_cast<T>(src[i] * factor);
}

void scale_float(const float* src, float* dst, std::size_t n, double factor) {
  // When the factor is a float (1/2, 1/4, 3, ...), float * float rounded once equals the double
  // product rounded to float, so the cheaper float multiply gives the same bits. Otherwise (1/3)
  // multiply in double and round once.
  const float f = static_cast<float>(factor);
  if (static_cast<double>(f) == factor) scale_native(src, dst, n, f);
  else scale_native(src, dst, n, factor);
}

template <float (*ToFloat)(uint16_t), uint16_t (*FromFloat)(float)>
void scale_16(const uint16_t* src, uint16_t* dst, std::size_t n, double factor) {
  const float f = static_cast<float>(factor);
  for (std::size_t i = 0; i < n; ++i) dst[i] = FromFloat(ToFloat(src[i]) * f);
}

template <class T>
void fill_n(void* data, std::size_t n, T value) {
  T* p = static_cast<T*>(data);
  for (std::size_t i = 0; i < n; ++i) p[i] = value;
}

template <class T>
T identity_of(ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum: return T{0};
    case ReduceOp::kProduct: return T{1};
    case ReduceOp::kMin:
      if constexpr (std::is_floating_point_v<T>) return std::numeric_limits<T>::infinity();
      else return std::numeric_limits<T>::max();
    case ReduceOp::kMax:
      if constexpr (std::is_floating_point_v<T>) return -std::numeric_limits<T>::infinity();
      else return std::numeric_limits<T>::lowest();
  }
  return T{0};
}

}  // namespace

// --- conversions ---------------------------------------------------------------------------------

float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  uint32_t bits;
  if (exp == 0x1f) {
    // Inf, or NaN with its payload kept and the quiet bit set.
    bits = sign | 0x7f800000u | (mant << 13) | (mant != 0 ? 0x00400000u : 0u);
  } else if (exp == 0) {
    if (mant == 0) {
      bits = sign;
    } else {
      // Subnormal: mant * 2^-24, exact in float.
      const float v = static_cast<float>(mant) * 0x1p-24f;
      return sign ? -v : v;
    }
  } else {
    bits = sign | ((exp + (127 - 15)) << 23) | (mant << 13);
  }
  return std::bit_cast<float>(bits);
}

uint16_t float_to_half(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u) {
    // NaN: quiet, with the top of the payload kept.
    return static_cast<uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  }
  if (ax >= 0x47800000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65536 (or Inf): Inf
  if (ax < 0x38800000u) {
    // Below 2^-14: a half subnormal (or zero). The result counts units of 2^-24:
    // value = m * 2^(e-150) = (m >> (126-e)) units, rounded to nearest even on the dropped bits.
    const uint32_t e = ax >> 23;
    const uint32_t shift = 126 - e;
    if (shift > 24) return sign;  // below 2^-25: rounds to zero
    const uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t halfway = 1u << (shift - 1);
    if (rem > halfway || (rem == halfway && (r & 1u))) ++r;  // r == 0x400 is the smallest normal
    return static_cast<uint16_t>(sign | r);
  }
  // Normal: rebias the exponent (-112 << 23) and round the 13 dropped bits to nearest even; a carry
  // out of the mantissa bumps the exponent, up to Inf (0x7c00) from just below 65536.
  const uint32_t odd = (ax >> 13) & 1u;
  ax += 0xc8000fffu + odd;
  return static_cast<uint16_t>(sign | (ax >> 13));
}

float bfloat16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  if ((bits & 0x7fffffffu) > 0x7f800000u) bits |= 0x00400000u;  // NaN: quiet
  return std::bit_cast<float>(bits);
}

uint16_t float_to_bfloat16(float f) {
  uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even; overflow carries into Inf
  return static_cast<uint16_t>(x >> 16);
}

// --- buffers -------------------------------------------------------------------------------------

void reduce_buffers(DataType dtype, ReduceOp op, const void* in, void* inout, std::size_t n) {
  if (n == 0) return;
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum: return reduce_typed(dtype, in, inout, n, SumFn{});
    case ReduceOp::kMin: return reduce_typed(dtype, in, inout, n, MinFn{});
    case ReduceOp::kMax: return reduce_typed(dtype, in, inout, n, MaxFn{});
    case ReduceOp::kProduct: return reduce_typed(dtype, in, inout, n, ProductFn{});
  }
}

void scale_buffer(DataType dtype, void* data, std::size_t n, double factor) {
  if (factor == 1.0 || n == 0) return;
  scale_copy(dtype, data, data, n, factor);
}

void scale_copy(DataType dtype, const void* src, void* dst, std::size_t n, double factor) {
  if (n == 0) return;
  if (factor == 1.0) {
    if (src != dst) std::memmove(dst, src, n * element_size(dtype));
    return;
  }
  switch (dtype) {
    case DataType::kUInt8:
      return scale_int(static_cast<const uint8_t*>(src), static_cast<uint8_t*>(dst), n, factor);
    case DataType::kInt8:
      return scale_int(static_cast<const int8_t*>(src), static_cast<int8_t*>(dst), n, factor);
    case DataType::kInt32:
      return scale_int(static_cast<const int32_t*>(src), static_cast<int32_t*>(dst), n, factor);
    case DataType::kInt64:
      return scale_int(static_cast<const int64_t*>(src), static_cast<int64_t*>(dst), n, factor);
    case DataType::kFloat32:
      return scale_float(static_cast<const float*>(src), static_cast<float*>(dst), n, factor);
    case DataType::kFloat64:
      return scale_native(static_cast<const double*>(src), static_cast<double*>(dst), n, factor);
    case DataType::kFloat16:
      return scale_16<half_to_float, float_to_half>(static_cast<const uint16_t*>(src),
                                                     static_cast<uint16_t*>(dst), n, factor);
    case DataType::kBFloat16:
      return scale_16<bfloat16_to_float, float_to_bfloat16>(static_cast<const uint16_t*>(src),
                                                             static_cast<uint16_t*>(dst), n, factor);
  }
}

void fill_identity(DataType dtype, ReduceOp op, void* data, std::size_t n) {
  switch (dtype) {
    case DataType::kUInt8: return fill_n(data, n, identity_of<uint8_t>(op));
    case DataType::kInt8: return fill_n(data, n, identity_of<int8_t>(op));
    case DataType::kInt32: return fill_n(data, n, identity_of<int32_t>(op));
    case DataType::kInt64: return fill_n(data, n, identity_of<int64_t>(op));
    case DataType::kFloat32: return fill_n(data, n, identity_of<float>(op));
    case DataType::kFloat64: return fill_n(data, n, identity_of<double>(op));
    case DataType::kFloat16: return fill_n(data, n, float_to_half(identity_of<float>(op)));
    case DataType::kBFloat16: return fill_n(data, n, float_to_bfloat16(identity_of<float>(op)));
  }
}

}  // namespace hvd::ops
