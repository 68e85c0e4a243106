// ops/dtype_math: fp16/bf16 conversions (exhaustive over every 16-bit pattern, plus the rounding
// edge cases), reduce_buffers for every dtype x op against a straightforward reference, scaling,
// and the identities a joined rank contributes.
#include "common/dtype_math.h"

#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace hvd::ops {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

uint32_t bits(float f) { return std::bit_cast<uint32_t>(f); }
float from_bits(uint32_t u) { return std::bit_cast<float>(u); }

bool half_is_nan(uint16_t h) { return (h & 0x7c00) == 0x7c00 && (h & 0x3ff) != 0; }
bool bf16_is_nan(uint16_t b) { return (b & 0x7f80) == 0x7f80 && (b & 0x7f) != 0; }

// An independent decoder for fp16: sign * mantissa * 2^exponent, in double.
double half_reference(uint16_t h) {
  const int sign = (h & 0x8000) ? -1 : 1;
  const int exp = (h >> 10) & 0x1f;
  const int mant = h & 0x3ff;
  if (exp == 0x1f) return mant ? std::nan("") : sign * std::numeric_limits<double>::infinity();
  if (exp == 0) return sign * std::ldexp(mant, -24);
  return sign * std::ldexp(1024 + mant, exp - 25);
}

// ---- fp16 <-> float ---------------------------------------------------------------------------

TEST(Half, EveryBitPatternDecodesToItsValue) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const float f = half_to_float(h);
    const double ref = half_reference(h);
    if (half_is_nan(h)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << i;
      EXPECT_TRUE(bits(f) & 0x00400000u) << "NaN must come out quiet: " << std::hex << i;
    } else {
      EXPECT_EQ(static_cast<double>(f), ref) << std::hex << i;
      EXPECT_EQ(std::signbit(f), (h & 0x8000) != 0) << std::hex << i;
    }
  }
}

TEST(Half, EveryBitPatternRoundTripsThroughFloat) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t h = static_cast<uint16_t>(i);
    const uint16_t back = float_to_half(half_to_float(h));
    if (half_is_nan(h)) {
      EXPECT_TRUE(half_is_nan(back)) << std::hex << i;
      EXPECT_EQ(back & 0x8000, h & 0x8000) << "NaN keeps its sign: " << std::hex << i;
      EXPECT_TRUE(back & 0x0200) << "NaN comes back quiet: " << std::hex << i;
      if (h & 0x0200) {
        EXPECT_EQ(back, h) << "quiet NaN payload kept: " << std::hex << i;
      }
    } else {
      EXPECT_EQ(back, h) << std::hex << i;
    }
  }
}

TEST(Half, RoundsHalfwayTiesToEven) {
  // Between 1 (0x3c00) and 1 + 2^-10 (0x3c01): the tie goes to the even 0x3c00.
  EXPECT_EQ(float_to_half(1.0f + 0x1p-11f), 0x3c00);
  // Between 0x3c01 and 0x3c02: the tie goes to the even 0x3c02.
  EXPECT_EQ(float_to_half(1.0f + 3 * 0x1p-11f), 0x3c02);
  // Just above / below a tie go to the nearer value.
  EXPECT_EQ(float_to_half(std::nextafter(1.0f + 0x1p-11f, 2.0f)), 0x3c01);
  EXPECT_EQ(float_to_half(std::nextafter(1.0f + 3 * 0x1p-11f, 0.0f)), 0x3c01);
  EXPECT_EQ(float_to_half(-(1.0f + 0x1p-11f)), 0xbc00);
  // 2049 is a tie between 2048 and 2050 (spacing 2): even mantissa is 2048.
  EXPECT_EQ(half_to_float(float_to_half(2049.0f)), 2048.0f);
  EXPECT_EQ(half_to_float(float_to_half(2051.0f)), 2052.0f);
}

TEST(Half, MaxFiniteAndOverflowToInf) {
  EXPECT_EQ(float_to_half(65504.0f), 0x7bff);
  EXPECT_EQ(half_to_float(0x7bff), 65504.0f);
  // 65520 is the tie between 65504 (odd mantissa 0x3ff) and 65536 (would be Inf): goes to Inf.
  EXPECT_EQ(float_to_half(std::nextafter(65520.0f, 0.0f)), 0x7bff);
  EXPECT_EQ(float_to_half(65520.0f), 0x7c00);
  EXPECT_EQ(float_to_half(65536.0f), 0x7c00);
  EXPECT_EQ(float_to_half(1e10f), 0x7c00);
  EXPECT_EQ(float_to_half(-1e10f), 0xfc00);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::max()), 0x7c00);
  EXPECT_EQ(float_to_half(kInf), 0x7c00);
  EXPECT_EQ(float_to_half(-kInf), 0xfc00);
  EXPECT_EQ(half_to_float(0x7c00), kInf);
  EXPECT_EQ(half_to_float(0xfc00), -kInf);
}

TEST(Half, SubnormalsAndZeros) {
  EXPECT_EQ(float_to_half(0x1p-24f), 0x0001);  // smallest subnormal
  EXPECT_EQ(half_to_float(0x0001), 0x1p-24f);
  EXPECT_EQ(float_to_half(0x1p-25f), 0x0000);  // tie between 0 and 2^-24: even is 0
  EXPECT_EQ(float_to_half(std::nextafter(0x1p-25f, 1.0f)), 0x0001);
  EXPECT_EQ(float_to_half(3 * 0x1p-25f), 0x0002);  // tie between 1 and 2 units: even is 2
  EXPECT_EQ(float_to_half(-0x1p-24f), 0x8001);
  EXPECT_EQ(float_to_half(0x1p-30f), 0x0000);
  EXPECT_EQ(float_to_half(-0x1p-30f), 0x8000);
  EXPECT_EQ(float_to_half(std::numeric_limits<float>::denorm_min()), 0x0000);
  EXPECT_EQ(float_to_half(0x1p-14f), 0x0400);             // smallest normal
  EXPECT_EQ(float_to_half(0x1p-14f - 0x1p-24f), 0x03ff);  // largest subnormal
  EXPECT_EQ(float_to_half(0x1p-14f - 0x1p-25f), 0x0400);  // tie, rounds up into normals
  EXPECT_EQ(half_to_float(0x03ff), 0x1p-14f - 0x1p-24f);
  EXPECT_EQ(float_to_half(0.0f), 0x0000);
  EXPECT_EQ(float_to_half(-0.0f), 0x8000);
  EXPECT_TRUE(std::signbit(half_to_float(0x8000)));
  EXPECT_EQ(half_to_float(0x8000), 0.0f);
}

TEST(Half, NaNStaysNaN) {
  EXPECT_TRUE(half_is_nan(float_to_half(kNaN)));
  EXPECT_TRUE(half_is_nan(float_to_half(-kNaN)));
  EXPECT_EQ(float_to_half(-kNaN) & 0x8000, 0x8000);
  // A NaN whose payload lives only in the low float bits (dropped by the conversion) must not
  // become Inf.
  EXPECT_TRUE(half_is_nan(float_to_half(from_bits(0x7f800001u))));
  EXPECT_TRUE(half_is_nan(float_to_half(from_bits(0xff800001u))));
  EXPECT_TRUE(std::isnan(half_to_float(0x7c01)));  // signalling half NaN
  EXPECT_TRUE(std::isnan(half_to_float(0x7e00)));
}

// Every float -> half result must be the nearest half, ties to the even one. Checked against the
// neighbours of the result on a million random floats across (and beyond) the half range.
TEST(Half, RandomFloatsRoundToNearestEven) {
  std::mt19937 rng(12345);
  std::uniform_int_distribution<int> exp_dist(-30, 17);
  std::uniform_int_distribution<uint32_t> mant_dist(0, (1u << 23) - 1);
  for (int i = 0; i < 1000000; ++i) {
    const float f =
        std::ldexp(1.0f + static_cast<float>(mant_dist(rng)) * 0x1p-23f, exp_dist(rng)) *
        ((i & 1) ? -1.0f : 1.0f);
    const uint16_t h = float_to_half(f);
    const double x = f;
    const double got = half_reference(h);
    if (std::isinf(got)) {
      EXPECT_GE(std::fabs(x), 65520.0) << f;
      continue;
    }
    ASSERT_FALSE(std::isnan(got)) << f;
    const double err = std::fabs(got - x);
    // The neighbours of h toward and away from zero.
    const uint16_t mag = h & 0x7fff;
    const uint16_t sign = h & 0x8000;
    if (mag < 0x7bff) {
      const double up = half_reference(static_cast<uint16_t>(sign | (mag + 1)));
      EXPECT_LE(err, std::fabs(up - x)) << f;
      if (err == std::fabs(up - x)) {
        EXPECT_EQ(h & 1, 0) << "tie must pick even: " << f;
      }
    }
    if (mag > 0) {
      const double down = half_reference(static_cast<uint16_t>(sign | (mag - 1)));
      EXPECT_LE(err, std::fabs(down - x)) << f;
      if (err == std::fabs(down - x)) {
        EXPECT_EQ(h & 1, 0) << "tie must pick even: " << f;
      }
    }
  }
}

// ---- bf16 <-> float ---------------------------------------------------------------------------

TEST(BFloat16, EveryBitPatternRoundTripsThroughFloat) {
  for (uint32_t i = 0; i < 65536; ++i) {
    const uint16_t b = static_cast<uint16_t>(i);
    const float f = bfloat16_to_float(b);
    const uint16_t back = float_to_bfloat16(f);
    if (bf16_is_nan(b)) {
      EXPECT_TRUE(std::isnan(f)) << std::hex << i;
      EXPECT_TRUE(bf16_is_nan(back)) << std::hex << i;
      EXPECT_TRUE(back & 0x0040) << "NaN comes back quiet: " << std::hex << i;
      EXPECT_EQ(back & 0x8000, b & 0x8000) << std::hex << i;
      if (b & 0x0040) {
        EXPECT_EQ(back, b) << std::hex << i;
      }
    } else {
      // bf16 is the top half of a float: the value is exactly those bits.
      EXPECT_EQ(bits(f), static_cast<uint32_t>(b) << 16) << std::hex << i;
      EXPECT_EQ(back, b) << std::hex << i;
    }
  }
}

TEST(BFloat16, RoundsToNearestEvenAndOverflowsToInf) {
  // 1 + 2^-8 is the tie between 1 (0x3f80) and 1 + 2^-7 (0x3f81): even is 0x3f80.
  EXPECT_EQ(float_to_bfloat16(1.0f + 0x1p-8f), 0x3f80);
  EXPECT_EQ(float_to_bfloat16(1.0f + 3 * 0x1p-8f), 0x3f82);
  EXPECT_EQ(float_to_bfloat16(std::nextafter(1.0f + 0x1p-8f, 2.0f)), 0x3f81);
  EXPECT_EQ(float_to_bfloat16(-(1.0f + 0x1p-8f)), 0xbf80);
  EXPECT_EQ(float_to_bfloat16(std::numeric_limits<float>::max()), 0x7f80);
  EXPECT_EQ(float_to_bfloat16(-std::numeric_limits<float>::max()), 0xff80);
  EXPECT_EQ(float_to_bfloat16(from_bits(0x7f7f7fffu)), 0x7f7f);  // just below the tie to Inf
  EXPECT_EQ(float_to_bfloat16(kInf), 0x7f80);
  EXPECT_EQ(float_to_bfloat16(-kInf), 0xff80);
  EXPECT_EQ(float_to_bfloat16(-0.0f), 0x8000);
  EXPECT_EQ(float_to_bfloat16(0.0f), 0x0000);
  // Subnormals: bf16 has float's exponent range, so they round like everything else.
  EXPECT_EQ(float_to_bfloat16(from_bits(0x00008000u)), 0x0000);  // tie to even 0
  EXPECT_EQ(float_to_bfloat16(from_bits(0x00018000u)), 0x0002);  // tie to even 2
  EXPECT_EQ(float_to_bfloat16(from_bits(0x00008001u)), 0x0001);
  EXPECT_EQ(float_to_bfloat16(from_bits(0x007fffffu)), 0x0080);  // rounds up into the normals
  EXPECT_TRUE(bf16_is_nan(float_to_bfloat16(kNaN)));
  EXPECT_TRUE(bf16_is_nan(float_to_bfloat16(from_bits(0x7f800001u))));  // payload only in low bits
  EXPECT_TRUE(bf16_is_nan(float_to_bfloat16(from_bits(0xffc00000u))));
  EXPECT_EQ(float_to_bfloat16(from_bits(0xffc00000u)) & 0x8000, 0x8000);
}

TEST(BFloat16, RandomFloatsRoundToNearestEven) {
  std::mt19937 rng(777);
  std::uniform_int_distribution<uint32_t> dist;
  for (int i = 0; i < 1000000; ++i) {
    const uint32_t x = dist(rng);
    const float f = from_bits(x);
    if (std::isnan(f)) continue;
    const uint16_t b = float_to_bfloat16(f);
    // The two candidates are the truncation and the next value away from zero.
    const uint32_t lo = x & 0xffff0000u;
    const uint32_t rem = x & 0xffffu;
    uint16_t expect = static_cast<uint16_t>(lo >> 16);
    if (rem > 0x8000u || (rem == 0x8000u && (expect & 1))) ++expect;
    ASSERT_EQ(b, expect) << std::hex << x;
  }
}

// ---- reduce_buffers ---------------------------------------------------------------------------

const DataType kAllTypes[] = {DataType::kUInt8,   DataType::kInt8,    DataType::kInt32,
                              DataType::kInt64,   DataType::kFloat16, DataType::kBFloat16,
                              DataType::kFloat32, DataType::kFloat64};
const ReduceOp kAllOps[] = {ReduceOp::kAverage, ReduceOp::kSum, ReduceOp::kMin, ReduceOp::kMax,
                            ReduceOp::kProduct};

std::size_t size_of(DataType t) {
  switch (t) {
    case DataType::kUInt8:
    case DataType::kInt8:
      return 1;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return 2;
    case DataType::kInt32:
    case DataType::kFloat32:
      return 4;
    default:
      return 8;
  }
}

// A small buffer of any dtype with get/set through double.
struct Buf {
  DataType t;
  std::vector<unsigned char> bytes;
  Buf(DataType t, std::size_t n) : t(t), bytes(n * size_of(t)) {}
  void* data() { return bytes.data(); }
  std::size_t n() const { return bytes.size() / size_of(t); }
  double get(std::size_t i) const {
    const unsigned char* p = bytes.data() + i * size_of(t);
    switch (t) {
      case DataType::kUInt8:
        return *p;
      case DataType::kInt8:
        return static_cast<int8_t>(*p);
      case DataType::kInt32: {
        int32_t v;
        std::memcpy(&v, p, 4);
        return v;
      }
      case DataType::kInt64: {
        int64_t v;
        std::memcpy(&v, p, 8);
        return static_cast<double>(v);
      }
      case DataType::kFloat32: {
        float v;
        std::memcpy(&v, p, 4);
        return v;
      }
      case DataType::kFloat64: {
        double v;
        std::memcpy(&v, p, 8);
        return v;
      }
      case DataType::kFloat16: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        return half_reference(v);
      }
      case DataType::kBFloat16: {
        uint16_t v;
        std::memcpy(&v, p, 2);
        return from_bits(uint32_t{v} << 16);
      }
    }
    return 0;
  }
  // v must be exactly representable (the tests only store small integers and halves).
  void set(std::size_t i, double v) {
    unsigned char* p = bytes.data() + i * size_of(t);
    switch (t) {
      case DataType::kUInt8:
        *p = static_cast<uint8_t>(v);
        break;
      case DataType::kInt8:
        *p = static_cast<unsigned char>(static_cast<int8_t>(v));
        break;
      case DataType::kInt32: {
        int32_t x = static_cast<int32_t>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case DataType::kInt64: {
        int64_t x = static_cast<int64_t>(v);
        std::memcpy(p, &x, 8);
        break;
      }
      case DataType::kFloat32: {
        float x = static_cast<float>(v);
        std::memcpy(p, &x, 4);
        break;
      }
      case DataType::kFloat64:
        std::memcpy(p, &v, 8);
        break;
      case DataType::kFloat16: {
        uint16_t x = float_to_half(static_cast<float>(v));
        std::memcpy(p, &x, 2);
        break;
      }
      case DataType::kBFloat16: {
        uint16_t x =
            static_cast<uint16_t>(bits(static_cast<float>(v)) >> 16);  // exact values: truncation
        std::memcpy(p, &x, 2);
        break;
      }
    }
    ASSERT_EQ(get(i), v) << "test value not exact in this dtype";
  }
};

bool is_signed_type(DataType t) { return t != DataType::kUInt8; }

double reference_op(ReduceOp op, double a, double b) {
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum:
      return a + b;
    case ReduceOp::kMin:
      return std::min(a, b);
    case ReduceOp::kMax:
      return std::max(a, b);
    case ReduceOp::kProduct:
      return a * b;
  }
  return 0;
}

// Values in [-8, 8] (or [0, 15] unsigned) and halves for floats: every sum and product of two is
// exact in every dtype, so the reference is plain double arithmetic.
TEST(ReduceBuffers, EveryDtypeAndOpMatchesReference) {
  // 37 elements: two full blocks of 16 and an odd tail.
  for (std::size_t n :
       {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{37}, std::size_t{1003}}) {
    for (DataType t : kAllTypes) {
      const bool is_float = t == DataType::kFloat16 || t == DataType::kBFloat16 ||
                            t == DataType::kFloat32 || t == DataType::kFloat64;
      for (ReduceOp op : kAllOps) {
        Buf in(t, n), inout(t, n);
        std::mt19937 rng(
            static_cast<unsigned>(n * 131 + static_cast<int>(t) * 7 + static_cast<int>(op)));
        // bf16 keeps 8 significant bits: 4.5 * 4.5 = 81/4 still fits, 8.5 * 8.5 would not.
        const int lim = t == DataType::kBFloat16 ? 4 : 8;
        std::uniform_int_distribution<int> d(is_signed_type(t) ? -lim : 0,
                                             is_signed_type(t) ? lim : 15);
        for (std::size_t i = 0; i < n; ++i) {
          in.set(i, d(rng) + (is_float && (i % 3 == 0) ? 0.5 : 0.0));
          inout.set(i, d(rng) + (is_float && (i % 5 == 0) ? -0.5 : 0.0));
        }
        std::vector<double> expect(n);
        for (std::size_t i = 0; i < n; ++i) expect[i] = reference_op(op, inout.get(i), in.get(i));
        const Buf in_before = in;
        reduce_buffers(t, op, in.data(), inout.data(), n);
        for (std::size_t i = 0; i < n; ++i) {
          ASSERT_EQ(inout.get(i), expect[i]) << "dtype " << static_cast<int>(t) << " op "
                                             << static_cast<int>(op) << " n " << n << " i " << i;
        }
        EXPECT_EQ(in.bytes, in_before.bytes) << "the input must be left alone";
      }
    }
  }
}

TEST(ReduceBuffers, IntegersWrapAround) {
  uint8_t a[2] = {200, 255}, b[2] = {100, 2};
  reduce_buffers(DataType::kUInt8, ReduceOp::kSum, a, b, 2);
  EXPECT_EQ(b[0], 44);
  EXPECT_EQ(b[1], 1);
  int32_t c[1] = {std::numeric_limits<int32_t>::max()}, d[1] = {1};
  reduce_buffers(DataType::kInt32, ReduceOp::kSum, c, d, 1);
  EXPECT_EQ(d[0], std::numeric_limits<int32_t>::min());
  int64_t e[1] = {int64_t{1} << 62}, f[1] = {4};
  reduce_buffers(DataType::kInt64, ReduceOp::kProduct, e, f, 1);
  EXPECT_EQ(f[0], 0);
  uint8_t g[1] = {16}, h[1] = {17};
  reduce_buffers(DataType::kUInt8, ReduceOp::kProduct, g, h, 1);
  EXPECT_EQ(h[0], static_cast<uint8_t>(16 * 17));
}

TEST(ReduceBuffers, FloatSpecialValues) {
  float a[4] = {kInf, kNaN, 1.0f, kNaN}, b[4] = {-kInf, 2.0f, kNaN, 3.0f};
  reduce_buffers(DataType::kFloat32, ReduceOp::kSum, a, b, 4);
  EXPECT_TRUE(std::isnan(b[0]));
  EXPECT_TRUE(std::isnan(b[1]));
  EXPECT_TRUE(std::isnan(b[2]));
  // min/max propagate NaN from either side.
  float c[2] = {kNaN, 1.0f}, d[2] = {1.0f, kNaN};
  reduce_buffers(DataType::kFloat32, ReduceOp::kMin, c, d, 2);
  EXPECT_TRUE(std::isnan(d[0]));
  EXPECT_TRUE(std::isnan(d[1]));
  double e[2] = {kNaN, 1.0}, f[2] = {1.0, kNaN};
  reduce_buffers(DataType::kFloat64, ReduceOp::kMax, e, f, 2);
  EXPECT_TRUE(std::isnan(f[0]));
  EXPECT_TRUE(std::isnan(f[1]));
  // fp16: 65504 + 65504 overflows to Inf; 2048 + 1 ties to the even 2048.
  uint16_t h_in[2] = {0x7bff, float_to_half(1.0f)}, h_io[2] = {0x7bff, float_to_half(2048.0f)};
  reduce_buffers(DataType::kFloat16, ReduceOp::kSum, h_in, h_io, 2);
  EXPECT_EQ(h_io[0], 0x7c00);
  EXPECT_EQ(half_to_float(h_io[1]), 2048.0f);
  // bf16: 256 + 1 ties to the even 256; NaN min stays NaN.
  uint16_t b_in[2] = {float_to_bfloat16(1.0f), float_to_bfloat16(kNaN)};
  uint16_t b_io[2] = {float_to_bfloat16(256.0f), float_to_bfloat16(1.0f)};
  reduce_buffers(DataType::kBFloat16, ReduceOp::kSum, b_in, b_io, 1);
  reduce_buffers(DataType::kBFloat16, ReduceOp::kMin, b_in + 1, b_io + 1, 1);
  EXPECT_EQ(bfloat16_to_float(b_io[0]), 256.0f);
  EXPECT_TRUE(bf16_is_nan(b_io[1]));
}

TEST(ReduceBuffers, LargeFloat32SumIsExact) {
  const std::size_t n = (1u << 20) + 13;
  std::vector<float> a(n), b(n);
  for (std::size_t i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 1000);
    b[i] = static_cast<float>(i % 77) - 30.0f;
  }
  reduce_buffers(DataType::kFloat32, ReduceOp::kSum, a.data(), b.data(), n);
  for (std::size_t i = 0; i < n; ++i)
    ASSERT_EQ(b[i], static_cast<float>(i % 1000) + static_cast<float>(i % 77) - 30.0f) << i;
}

// ---- scale ------------------------------------------------------------------------------------

TEST(Scale, FloatsAreScaled) {
  for (std::size_t n : {std::size_t{0}, std::size_t{1}, std::size_t{7}, std::size_t{100}}) {
    std::vector<float> f(n);
    std::vector<double> d(n);
    for (std::size_t i = 0; i < n; ++i)
      f[i] = static_cast<float>(i) - 3.0f, d[i] = static_cast<double>(i) - 3.0;
    scale_buffer(DataType::kFloat32, f.data(), n, 0.25);
    scale_buffer(DataType::kFloat64, d.data(), n, 3.0);
    for (std::size_t i = 0; i < n; ++i) {
      EXPECT_EQ(f[i], (static_cast<float>(i) - 3.0f) * 0.25f);
      EXPECT_EQ(d[i], (static_cast<double>(i) - 3.0) * 3.0);
    }
  }
  // A factor that is not a float (1/3) is applied in double and rounded once.
  std::vector<float> g = {3.0f, 6.0f, 1.0f, 1e-3f};
  std::vector<float> out(4);
  scale_copy(DataType::kFloat32, g.data(), out.data(), 4, 1.0 / 3.0);
  for (int i = 0; i < 4; ++i)
    EXPECT_EQ(out[i], static_cast<float>(static_cast<double>(g[i]) / 3.0)) << i;
  EXPECT_EQ(g[0], 3.0f) << "scale_copy leaves the source alone";
}

TEST(Scale, IntegersTruncateTowardZeroAndSaturate) {
  int32_t a[5] = {7, -7, 5, -5, 1000000000};
  scale_buffer(DataType::kInt32, a, 5, 0.5);
  EXPECT_EQ(a[0], 3);
  EXPECT_EQ(a[1], -3);
  EXPECT_EQ(a[2], 2);
  EXPECT_EQ(a[3], -2);
  EXPECT_EQ(a[4], 500000000);
  int32_t big[2] = {2000000000, -2000000000};
  scale_buffer(DataType::kInt32, big, 2, 4.0);
  EXPECT_EQ(big[0], std::numeric_limits<int32_t>::max());
  EXPECT_EQ(big[1], std::numeric_limits<int32_t>::min());
  uint8_t u[3] = {10, 255, 3};
  uint8_t u_out[3];
  scale_copy(DataType::kUInt8, u, u_out, 3, 1.0 / 3.0);
  EXPECT_EQ(u_out[0], 3);
  EXPECT_EQ(u_out[1], 85);
  EXPECT_EQ(u_out[2], 1);  // 3 * (1/3) in double is exactly 1
  int8_t s[3] = {-128, 100, -3};
  scale_buffer(DataType::kInt8, s, 3, -1.0);
  EXPECT_EQ(s[0], 127);  // saturates
  EXPECT_EQ(s[1], -100);
  EXPECT_EQ(s[2], 3);
  int64_t l[2] = {int64_t{1} << 52, -9};
  scale_buffer(DataType::kInt64, l, 2, 0.5);
  EXPECT_EQ(l[0], int64_t{1} << 51);
  EXPECT_EQ(l[1], -4);
}

TEST(Scale, SixteenBitFloatsViaFloat) {
  uint16_t h[3] = {float_to_half(3.0f), float_to_half(-2.5f), float_to_half(60000.0f)};
  scale_buffer(DataType::kFloat16, h, 3, 0.5);
  EXPECT_EQ(half_to_float(h[0]), 1.5f);
  EXPECT_EQ(half_to_float(h[1]), -1.25f);
  EXPECT_EQ(half_to_float(h[2]), 30000.0f);
  uint16_t o[1] = {float_to_half(60000.0f)};
  scale_buffer(DataType::kFloat16, o, 1, 2.0);
  EXPECT_EQ(o[0], 0x7c00) << "overflow becomes Inf";
  uint16_t b[2] = {float_to_bfloat16(3.0f), float_to_bfloat16(-7.0f)};
  uint16_t b_out[2];
  scale_copy(DataType::kBFloat16, b, b_out, 2, 0.25);
  EXPECT_EQ(bfloat16_to_float(b_out[0]), 0.75f);
  EXPECT_EQ(bfloat16_to_float(b_out[1]), -1.75f);
  // 1/3 of 3 in float is 1 exactly after rounding to half.
  uint16_t t[1] = {float_to_half(3.0f)};
  scale_buffer(DataType::kFloat16, t, 1, 1.0 / 3.0);
  EXPECT_EQ(half_to_float(t[0]), 1.0f);
}

TEST(Scale, FactorOneAndInPlaceCopy) {
  float f[3] = {1.5f, kNaN, -2.0f};
  uint32_t before[3];
  std::memcpy(before, f, sizeof f);
  scale_buffer(DataType::kFloat32, f, 3, 1.0);
  EXPECT_EQ(std::memcmp(before, f, sizeof f), 0);
  float src[3] = {1.0f, 2.0f, 3.0f}, dst[3] = {0, 0, 0};
  scale_copy(DataType::kFloat32, src, dst, 3, 1.0);
  EXPECT_EQ(dst[2], 3.0f);
  std::vector<double> v(50);
  for (int i = 0; i < 50; ++i) v[i] = i;
  scale_copy(DataType::kFloat64, v.data(), v.data(), 50, -2.0);  // src == dst
  for (int i = 0; i < 50; ++i) EXPECT_EQ(v[i], -2.0 * i);
}

// ---- identity ---------------------------------------------------------------------------------

TEST(FillIdentity, EveryDtypeAndOp) {
  for (DataType t : kAllTypes) {
    for (ReduceOp op : kAllOps) {
      Buf b(t, 5);
      std::fill(b.bytes.begin(), b.bytes.end(), 0x5a);
      fill_identity(t, op, b.data(), 5);
      double expect = 0;
      double lo = 0, hi = 0;
      switch (t) {
        case DataType::kUInt8:
          lo = 0, hi = 255;
          break;
        case DataType::kInt8:
          lo = -128, hi = 127;
          break;
        case DataType::kInt32:
          lo = std::numeric_limits<int32_t>::min(), hi = std::numeric_limits<int32_t>::max();
          break;
        case DataType::kInt64:
          lo = static_cast<double>(std::numeric_limits<int64_t>::min());
          hi = static_cast<double>(std::numeric_limits<int64_t>::max());
          break;
        default:
          lo = -std::numeric_limits<double>::infinity(),
          hi = std::numeric_limits<double>::infinity();
      }
      switch (op) {
        case ReduceOp::kAverage:
        case ReduceOp::kSum:
          expect = 0;
          break;
        case ReduceOp::kProduct:
          expect = 1;
          break;
        case ReduceOp::kMin:
          expect = hi;
          break;
        case ReduceOp::kMax:
          expect = lo;
          break;
      }
      for (std::size_t i = 0; i < 5; ++i)
        EXPECT_EQ(b.get(i), expect) << static_cast<int>(t) << " " << static_cast<int>(op);
      if (t == DataType::kInt64) {
        int64_t v;
        std::memcpy(&v, b.bytes.data(), 8);
        if (op == ReduceOp::kMin) {
          EXPECT_EQ(v, std::numeric_limits<int64_t>::max());
        }
        if (op == ReduceOp::kMax) {
          EXPECT_EQ(v, std::numeric_limits<int64_t>::min());
        }
      }
      // Reducing any value with the identity gives the value back.
      Buf x(t, 5);
      for (std::size_t i = 0; i < 5; ++i)
        x.set(i, (is_signed_type(t) ? -2.0 : 2.0) + static_cast<double>(i));
      Buf y = x;
      reduce_buffers(t, op, b.data(), y.data(), 5);
      EXPECT_EQ(y.bytes, x.bytes) << static_cast<int>(t) << " " << static_cast<int>(op);
    }
  }
}

}  // namespace
}  // namespace hvd::ops
