#include "common/dtype_math.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "common/dtype.h"

// Why the loops look the way they do: the library is built with -O2, where GCC 12 only vectorises
// a loop whose trip count is a known multiple of the vector width ("very-cheap" cost model), and
// never versions a loop for possible aliasing. So each hot loop runs over fixed blocks of kBlock
// elements through __restrict pointers (the block is unrolled and vectorised as a straight line)
// and finishes the remainder with a scalar loop. This keeps the float32 sum and scale passes over a
// 64 MiB fusion buffer memory-bound instead of compute-bound, without any compiler flag.
//
// fp16/bf16 arithmetic is done in float and rounded once to the 16-bit format. For +, -, * and /
// that is correctly rounded, because float carries at least 2p+2 bits of a p-bit format (24 >=
// 2*11+2 for fp16, 24 >= 2*8+2 for bf16), so the double rounding cannot go wrong.

namespace hvd {
namespace {

constexpr std::size_t kBlock = 16;

std::size_t element_size(DataType dtype) { return dtypes::size(dtype); }

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
  if constexpr (std::is_floating_point_v<T>)
    return (b < a || b != b) ? b : a;
  else
    return b < a ? b : a;
}

template <class T>
inline T max_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>)
    return (b > a || b != b) ? b : a;
  else
    return b > a ? b : a;
}

struct SumFn {
  template <class T>
  T operator()(T a, T b) const {
    return wrap_add(a, b);
  }
};
struct ProductFn {
  template <class T>
  T operator()(T a, T b) const {
    return wrap_mul(a, b);
  }
};
struct MinFn {
  template <class T>
  T operator()(T a, T b) const {
    return min_of(a, b);
  }
};
struct MaxFn {
  template <class T>
  T operator()(T a, T b) const {
    return max_of(a, b);
  }
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
  if (static_cast<double>(f) == factor)
    scale_native(src, dst, n, f);
  else
    scale_native(src, dst, n, factor);
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
    case ReduceOp::kSum:
      return T{0};
    case ReduceOp::kProduct:
      return T{1};
    case ReduceOp::kMin:
      if constexpr (std::is_floating_point_v<T>)
        return std::numeric_limits<T>::infinity();
      else
        return std::numeric_limits<T>::max();
    case ReduceOp::kMax:
      if constexpr (std::is_floating_point_v<T>)
        return -std::numeric_limits<T>::infinity();
      else
        return std::numeric_limits<T>::lowest();
  }
  return T{0};
}

// --- compression (HVD_COMPRESSION) ---------------------------------------------------------------
// double -> float rounded to odd: the value truncated toward zero, with the last bit set when
// anything was dropped. A later round-to-nearest-even to p <= 22 bits of that float equals the
// direct rounding of d (float keeps p + 2 bits, and the odd bit says "not a tie").
inline float to_float_round_odd(double d) {
  const float f = static_cast<float>(d);
  if (static_cast<double>(f) == d || d != d) return f;  // exact, or NaN
  uint32_t b = std::bit_cast<uint32_t>(f);
  if (std::fabs(static_cast<double>(f)) > std::fabs(d)) --b;  // rounded away (Inf too): truncate
  return std::bit_cast<float>(b | 1u);
}

[[noreturn]] void not_compressible(DataType dtype, DataType wire) {
  throw std::invalid_argument("compression of dtype " + std::to_string(static_cast<int>(dtype)) +
                              " to wire dtype " + std::to_string(static_cast<int>(wire)) +
                              " is not supported");
}

template <uint16_t (*FromFloat)(float), uint16_t (*FromDouble)(double)>
void compress_typed(DataType dtype, DataType wire, const void* src, uint16_t* __restrict dst,
                    std::size_t n, double factor) {
  if (dtype == DataType::kFloat32) {
    const float* __restrict s = static_cast<const float*>(src);
    if (factor == 1.0) {
      for (std::size_t i = 0; i < n; ++i) dst[i] = FromFloat(s[i]);
    } else {
      for (std::size_t i = 0; i < n; ++i) dst[i] = FromDouble(static_cast<double>(s[i]) * factor);
    }
  } else if (dtype == DataType::kFloat64) {
    const double* __restrict s = static_cast<const double*>(src);
    if (factor == 1.0) {
      for (std::size_t i = 0; i < n; ++i) dst[i] = FromDouble(s[i]);
    } else {
      for (std::size_t i = 0; i < n; ++i) dst[i] = FromDouble(s[i] * factor);
    }
  } else {
    not_compressible(dtype, wire);
  }
}

template <float (*ToFloat)(uint16_t)>
void decompress_typed(DataType wire, DataType dtype, const uint16_t* __restrict src, void* dst,
                      std::size_t n, double factor) {
  if (dtype == DataType::kFloat32) {
    float* __restrict d = static_cast<float*>(dst);
    const float f = static_cast<float>(factor);
    if (factor == 1.0) {
      for (std::size_t i = 0; i < n; ++i) d[i] = ToFloat(src[i]);
    } else if (static_cast<double>(f) == factor) {
      for (std::size_t i = 0; i < n; ++i) d[i] = ToFloat(src[i]) * f;
    } else {
      for (std::size_t i = 0; i < n; ++i)
        d[i] = static_cast<float>(static_cast<double>(ToFloat(src[i])) * factor);
    }
  } else if (dtype == DataType::kFloat64) {
    double* __restrict d = static_cast<double*>(dst);
    for (std::size_t i = 0; i < n; ++i) d[i] = static_cast<double>(ToFloat(src[i])) * factor;
  } else {
    not_compressible(dtype, wire);
  }
}

// k blocks combined element-wise in double, a tile at a time (the k input streams and the output
// stay few and sequential), then scaled and rounded once. out may alias a block: a tile is read
// completely before it is written.
template <float (*ToFloat)(uint16_t), uint16_t (*FromDouble)(double), class Fn>
void reduce_blocks_typed(const uint16_t* blocks, std::size_t k, std::size_t stride, std::size_t n,
                         double factor, uint16_t* out, Fn fn) {
  constexpr std::size_t kTile = 1024;
  double acc[kTile];
  for (std::size_t t = 0; t < n; t += kTile) {
    const std::size_t m = std::min(kTile, n - t);
    const uint16_t* b0 = blocks + t;
    for (std::size_t i = 0; i < m; ++i) acc[i] = static_cast<double>(ToFloat(b0[i]));
    for (std::size_t j = 1; j < k; ++j) {
      const uint16_t* b = blocks + j * stride + t;
      for (std::size_t i = 0; i < m; ++i) acc[i] = fn(acc[i], static_cast<double>(ToFloat(b[i])));
    }
    if (factor != 1.0) {
      for (std::size_t i = 0; i < m; ++i) acc[i] *= factor;
    }
    for (std::size_t i = 0; i < m; ++i) out[t + i] = FromDouble(acc[i]);
  }
}

template <class Fn>
void reduce_blocks_fn(DataType wire, const uint16_t* blocks, std::size_t k, std::size_t stride,
                      std::size_t n, double factor, uint16_t* out, Fn fn) {
  if (wire == DataType::kFloat16) {
    reduce_blocks_typed<half_to_float, double_to_half>(blocks, k, stride, n, factor, out, fn);
  } else if (wire == DataType::kBFloat16) {
    reduce_blocks_typed<bfloat16_to_float, double_to_bfloat16>(blocks, k, stride, n, factor, out,
                                                               fn);
  } else {
    not_compressible(wire, wire);
  }
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
  if ((x & 0x7fffffffu) > 0x7f800000u)
    return static_cast<uint16_t>((x >> 16) | 0x0040u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);  // round to nearest even; overflow carries into Inf
  return static_cast<uint16_t>(x >> 16);
}

uint16_t double_to_half(double d) { return float_to_half(to_float_round_odd(d)); }

uint16_t double_to_bfloat16(double d) { return float_to_bfloat16(to_float_round_odd(d)); }

// --- buffers -------------------------------------------------------------------------------------

void reduce_buffers(DataType dtype, ReduceOp op, const void* in, void* inout, std::size_t n) {
  if (n == 0) return;
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum:
      return reduce_typed(dtype, in, inout, n, SumFn{});
    case ReduceOp::kMin:
      return reduce_typed(dtype, in, inout, n, MinFn{});
    case ReduceOp::kMax:
      return reduce_typed(dtype, in, inout, n, MaxFn{});
    case ReduceOp::kProduct:
      return reduce_typed(dtype, in, inout, n, ProductFn{});
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
    case DataType::kUInt8:
      return fill_n(data, n, identity_of<uint8_t>(op));
    case DataType::kInt8:
      return fill_n(data, n, identity_of<int8_t>(op));
    case DataType::kInt32:
      return fill_n(data, n, identity_of<int32_t>(op));
    case DataType::kInt64:
      return fill_n(data, n, identity_of<int64_t>(op));
    case DataType::kFloat32:
      return fill_n(data, n, identity_of<float>(op));
    case DataType::kFloat64:
      return fill_n(data, n, identity_of<double>(op));
    case DataType::kFloat16:
      return fill_n(data, n, float_to_half(identity_of<float>(op)));
    case DataType::kBFloat16:
      return fill_n(data, n, float_to_bfloat16(identity_of<float>(op)));
  }
}

}  // namespace hvd

// --- compression, vectorised (x86-64 with AVX2 and F16C, picked at run time) ---------------------
// The same arithmetic as the scalar code above, 8 elements at a time: F16C's conversions round to
// nearest even like float_to_half (NaN payloads included), bf16 uses the same integer rounding,
// and double -> 16 bits goes through the same round-to-odd float. Each function handles a multiple
// of 8 elements and returns how many; the scalar code does the rest (and everything on other CPUs).
// tests/collectives/test_compression.cc compares both paths bit for bit.
#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#include <immintrin.h>

namespace hvd {
namespace {

#define HVD_SIMD __attribute__((target("avx2,f16c")))

// AVX2 (which also says the OS saves the YMM registers) and F16C (CPUID leaf 1, ECX bit 29; clang's
// __builtin_cpu_supports does not know "f16c").
bool simd_available() {
  static const bool ok = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __builtin_cpu_supports("avx2") && __get_cpuid(1, &a, &b, &c, &d) != 0 &&
           (c & (1u << 29)) != 0;
  }();
  return ok;
}

// 8 16-bit values -> 8 floats (exact).
HVD_SIMD inline __m256 widen8(DataType wire, const uint16_t* p) {
  const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  if (wire == DataType::kFloat16) return _mm256_cvtph_ps(h);
  __m256i bits = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
  const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(bits, _mm256_set1_epi32(0x7fffffff)),
                                         _mm256_set1_epi32(0x7f800000));
  bits = _mm256_or_si256(bits, _mm256_and_si256(nan, _mm256_set1_epi32(0x00400000)));  // NaN: quiet
  return _mm256_castsi256_ps(bits);
}

// 8 floats -> 8 16-bit values, round to nearest even.
HVD_SIMD inline void narrow8(DataType wire, __m256 f, uint16_t* p) {
  __m128i out;
  if (wire == DataType::kFloat16) {
    out = _mm256_cvtps_ph(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  } else {
    const __m256i x = _mm256_castps_si256(f);
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i odd = _mm256_and_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(1));
    const __m256i rounded = _mm256_srli_epi32(
        _mm256_add_epi32(_mm256_add_epi32(x, _mm256_set1_epi32(0x7fff)), odd), 16);
    const __m256i quiet = _mm256_or_si256(_mm256_srli_epi32(x, 16), _mm256_set1_epi32(0x40));
    const __m256i v = _mm256_blendv_epi8(rounded, quiet, nan);
    out = _mm256_castsi256_si128(_mm256_permute4x64_epi64(_mm256_packus_epi32(v, v), 0x08));
  }
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), out);
}

// 4 + 4 doubles -> 8 floats rounded to odd (to_float_round_odd).
HVD_SIMD inline __m128i odd4(__m256d d) {
  const __m128 f = _mm256_cvtpd_ps(d);
  const __m256d back = _mm256_cvtps_pd(f);
  const __m256d abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fffffffffffffffLL));
  const __m256d inexact = _mm256_cmp_pd(back, d, _CMP_NEQ_OQ);  // false for NaN
  const __m256d away =
      _mm256_cmp_pd(_mm256_and_pd(back, abs_mask), _mm256_and_pd(d, abs_mask), _CMP_GT_OQ);
  const __m256i pick = _mm256_setr_epi32(0, 2, 4, 6, 0, 2, 4, 6);
  const __m128i inexact32 =
      _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(inexact), pick));
  const __m128i away32 =
      _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(_mm256_castpd_si256(away), pick));
  __m128i bits = _mm_add_epi32(_mm_castps_si128(f), away32);  // -1 where rounded away: truncate
  return _mm_or_si128(bits, _mm_and_si128(inexact32, _mm_set1_epi32(1)));
}

HVD_SIMD inline __m256 odd8(__m256d lo, __m256d hi) {
  return _mm256_castsi256_ps(_mm256_set_m128i(odd4(hi), odd4(lo)));
}

HVD_SIMD std::size_t compress_simd(DataType dtype, DataType wire, const void* src, uint16_t* dst,
                                   std::size_t n, double factor) {
  const std::size_t m = n / 8 * 8;
  const __m256d fd = _mm256_set1_pd(factor);
  if (dtype == DataType::kFloat32) {
    const float* s = static_cast<const float*>(src);
    if (factor == 1.0) {
      for (std::size_t i = 0; i < m; i += 8) narrow8(wire, _mm256_loadu_ps(s + i), dst + i);
    } else {
      for (std::size_t i = 0; i < m; i += 8) {
        const __m256 f = _mm256_loadu_ps(s + i);
        const __m256d lo = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(f)), fd);
        const __m256d hi = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(f, 1)), fd);
        narrow8(wire, odd8(lo, hi), dst + i);
      }
    }
    return m;
  }
  if (dtype == DataType::kFloat64) {
    const double* s = static_cast<const double*>(src);
    for (std::size_t i = 0; i < m; i += 8) {
      __m256d lo = _mm256_loadu_pd(s + i), hi = _mm256_loadu_pd(s + i + 4);
      if (factor != 1.0) {
        lo = _mm256_mul_pd(lo, fd);
        hi = _mm256_mul_pd(hi, fd);
      }
      narrow8(wire, odd8(lo, hi), dst + i);
    }
    return m;
  }
  return 0;
}

HVD_SIMD std::size_t decompress_simd(DataType wire, DataType dtype, const uint16_t* src, void* dst,
                                     std::size_t n, double factor) {
  const std::size_t m = n / 8 * 8;
  const __m256d fd = _mm256_set1_pd(factor);
  if (dtype == DataType::kFloat32) {
    float* d = static_cast<float*>(dst);
    const float f = static_cast<float>(factor);
    const __m256 ff = _mm256_set1_ps(f);
    for (std::size_t i = 0; i < m; i += 8) {
      __m256 v = widen8(wire, src + i);
      if (factor == 1.0) {
      } else if (static_cast<double>(f) == factor) {
        v = _mm256_mul_ps(v, ff);
      } else {
        const __m128 lo =
            _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), fd));
        const __m128 hi =
            _mm256_cvtpd_ps(_mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), fd));
        v = _mm256_set_m128(hi, lo);
      }
      _mm256_storeu_ps(d + i, v);
    }
    return m;
  }
  if (dtype == DataType::kFloat64) {
    double* d = static_cast<double*>(dst);
    for (std::size_t i = 0; i < m; i += 8) {
      const __m256 v = widen8(wire, src + i);
      _mm256_storeu_pd(d + i, _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(v)), fd));
      _mm256_storeu_pd(d + i + 4, _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)), fd));
    }
    return m;
  }
  return 0;
}

HVD_SIMD inline __m256d combine4(ReduceOp op, __m256d a, __m256d b) {
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum:
      return _mm256_add_pd(a, b);
    case ReduceOp::kProduct:
      return _mm256_mul_pd(a, b);
    case ReduceOp::kMin:  // (b < a || b != b) ? b : a, as min_of
      return _mm256_blendv_pd(
          a, b, _mm256_or_pd(_mm256_cmp_pd(b, a, _CMP_LT_OQ), _mm256_cmp_pd(b, b, _CMP_UNORD_Q)));
    case ReduceOp::kMax:
      return _mm256_blendv_pd(
          a, b, _mm256_or_pd(_mm256_cmp_pd(b, a, _CMP_GT_OQ), _mm256_cmp_pd(b, b, _CMP_UNORD_Q)));
  }
  return a;
}

HVD_SIMD std::size_t reduce_blocks_simd(DataType wire, ReduceOp op, const uint16_t* blocks,
                                        std::size_t k, std::size_t stride, std::size_t n,
                                        double factor, uint16_t* out) {
  const std::size_t m = n / 8 * 8;
  const __m256d fd = _mm256_set1_pd(factor);
  for (std::size_t i = 0; i < m; i += 8) {
    __m256 v = widen8(wire, blocks + i);
    __m256d lo = _mm256_cvtps_pd(_mm256_castps256_ps128(v)),
            hi = _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1));
    for (std::size_t j = 1; j < k; ++j) {
      v = widen8(wire, blocks + j * stride + i);
      lo = combine4(op, lo, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
      hi = combine4(op, hi, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    }
    if (factor != 1.0) {
      lo = _mm256_mul_pd(lo, fd);
      hi = _mm256_mul_pd(hi, fd);
    }
    narrow8(wire, odd8(lo, hi), out + i);
  }
  return m;
}

#undef HVD_SIMD

}  // namespace
}  // namespace hvd
#define HVD_DTYPE_SIMD 1
#else
#define HVD_DTYPE_SIMD 0
#endif

namespace hvd {

namespace {
#if HVD_DTYPE_SIMD
bool use_simd() { return simd_enabled().load(std::memory_order_relaxed) && simd_available(); }
#endif
// The number of leading elements the vectorised code handled (0 without it, or when disabled).
std::size_t simd_compress(DataType dtype, DataType wire, const void* src, uint16_t* dst,
                          std::size_t n, double factor) {
#if HVD_DTYPE_SIMD
  if (use_simd()) return compress_simd(dtype, wire, src, dst, n, factor);
#endif
  (void)dtype, (void)wire, (void)src, (void)dst, (void)n, (void)factor;
  return 0;
}
std::size_t simd_decompress(DataType wire, DataType dtype, const uint16_t* src, void* dst,
                            std::size_t n, double factor) {
#if HVD_DTYPE_SIMD
  if (use_simd()) return decompress_simd(wire, dtype, src, dst, n, factor);
#endif
  (void)dtype, (void)wire, (void)src, (void)dst, (void)n, (void)factor;
  return 0;
}
std::size_t simd_reduce(DataType wire, ReduceOp op, const uint16_t* blocks, std::size_t k,
                        std::size_t stride, std::size_t n, double factor, uint16_t* out) {
#if HVD_DTYPE_SIMD
  if (use_simd()) return reduce_blocks_simd(wire, op, blocks, k, stride, n, factor, out);
#endif
  (void)wire, (void)op, (void)blocks, (void)k, (void)stride, (void)n, (void)factor, (void)out;
  return 0;
}
}  // namespace

std::atomic<bool>& simd_enabled() {
  static std::atomic<bool> enabled{true};
  return enabled;
}

void compress_copy(DataType dtype, DataType wire, const void* src, uint16_t* dst, std::size_t n,
                   double factor) {
  if (wire != DataType::kFloat16 && wire != DataType::kBFloat16) not_compressible(dtype, wire);
  if (dtype != DataType::kFloat32 && dtype != DataType::kFloat64) not_compressible(dtype, wire);
  const std::size_t done = simd_compress(dtype, wire, src, dst, n, factor);
  src = static_cast<const char*>(src) + done * element_size(dtype);
  dst += done;
  n -= done;
  if (wire == DataType::kFloat16)
    return compress_typed<float_to_half, double_to_half>(dtype, wire, src, dst, n, factor);
  return compress_typed<float_to_bfloat16, double_to_bfloat16>(dtype, wire, src, dst, n, factor);
}

void decompress_copy(DataType wire, DataType dtype, const uint16_t* src, void* dst, std::size_t n,
                     double factor) {
  if (wire != DataType::kFloat16 && wire != DataType::kBFloat16) not_compressible(dtype, wire);
  if (dtype != DataType::kFloat32 && dtype != DataType::kFloat64) not_compressible(dtype, wire);
  const std::size_t done = simd_decompress(wire, dtype, src, dst, n, factor);
  src += done;
  dst = static_cast<char*>(dst) + done * element_size(dtype);
  n -= done;
  if (wire == DataType::kFloat16)
    return decompress_typed<half_to_float>(wire, dtype, src, dst, n, factor);
  return decompress_typed<bfloat16_to_float>(wire, dtype, src, dst, n, factor);
}

void reduce_blocks_16(DataType wire, ReduceOp op, const uint16_t* blocks, std::size_t k,
                      std::size_t stride, std::size_t n, double factor, uint16_t* out) {
  if (n == 0 || k == 0) return;
  if (wire != DataType::kFloat16 && wire != DataType::kBFloat16) not_compressible(wire, wire);
  const std::size_t done = simd_reduce(wire, op, blocks, k, stride, n, factor, out);
  blocks += done;
  out += done;
  n -= done;
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum:
      return reduce_blocks_fn(wire, blocks, k, stride, n, factor, out, SumFn{});
    case ReduceOp::kMin:
      return reduce_blocks_fn(wire, blocks, k, stride, n, factor, out, MinFn{});
    case ReduceOp::kMax:
      return reduce_blocks_fn(wire, blocks, k, stride, n, factor, out, MaxFn{});
    case ReduceOp::kProduct:
      return reduce_blocks_fn(wire, blocks, k, stride, n, factor, out, ProductFn{});
  }
}

namespace {
// reduce_blocks_ordered() for float and double: a tile at a time, as reduce_blocks_typed.
template <class T, class Fn>
void reduce_blocks_wide(const T* blocks, std::size_t k, std::size_t stride, std::size_t n, T* out,
                        Fn fn) {
  constexpr std::size_t kTile = 1024;
  double acc[kTile];
  for (std::size_t t = 0; t < n; t += kTile) {
    const std::size_t m = std::min(kTile, n - t);
    const T* b0 = blocks + t;
    for (std::size_t i = 0; i < m; ++i) acc[i] = static_cast<double>(b0[i]);
    for (std::size_t j = 1; j < k; ++j) {
      const T* b = blocks + j * stride + t;
      for (std::size_t i = 0; i < m; ++i) acc[i] = fn(acc[i], static_cast<double>(b[i]));
    }
    for (std::size_t i = 0; i < m; ++i) out[t + i] = static_cast<T>(acc[i]);
  }
}

template <class T>
void reduce_blocks_wide(ReduceOp op, const void* blocks, std::size_t k, std::size_t stride,
                        std::size_t n, void* out) {
  const T* b = static_cast<const T*>(blocks);
  T* o = static_cast<T*>(out);
  if (op == ReduceOp::kProduct) return reduce_blocks_wide(b, k, stride, n, o, ProductFn{});
  reduce_blocks_wide(b, k, stride, n, o, SumFn{});
}
}  // namespace

bool ordered_reduction(DataType dtype, ReduceOp op) {
  const bool floating = dtype == DataType::kFloat32 || dtype == DataType::kFloat64 ||
                        dtype == DataType::kFloat16 || dtype == DataType::kBFloat16;
  return floating && (op == ReduceOp::kSum || op == ReduceOp::kAverage || op == ReduceOp::kProduct);
}

void reduce_blocks_ordered(DataType dtype, ReduceOp op, const void* blocks, std::size_t k,
                           std::size_t stride, std::size_t n, void* out) {
  if (!ordered_reduction(dtype, op))
    throw std::invalid_argument(
        "reduce_blocks_ordered: dtype " + std::to_string(static_cast<int>(dtype)) +
        " with reduce op " + std::to_string(static_cast<int>(op)) + " needs no ordered reduction");
  if (n == 0 || k == 0) return;
  switch (dtype) {
    case DataType::kFloat32:
      return reduce_blocks_wide<float>(op, blocks, k, stride, n, out);
    case DataType::kFloat64:
      return reduce_blocks_wide<double>(op, blocks, k, stride, n, out);
    default:  // float16, bfloat16
      return reduce_blocks_16(dtype, op, static_cast<const uint16_t*>(blocks), k, stride, n, 1.0,
                              static_cast<uint16_t*>(out));
  }
}

}  // namespace hvd
