// common/dtype_math: reduce_blocks_ordered(), the reduction of HVD_DETERMINISTIC. Every element is
// the fold of its k operands in block order, widened to double and rounded once to the dtype: the
// results are compared bit for bit with a reference fold written here, for float32, float64,
// float16 and bfloat16, sum and product, 1 to 5 blocks and lengths around the tile size, with the
// output aliasing block 0; and an element's result does not depend on where it sits.
#include "common/dtype_math.h"

#include <gtest/gtest.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <random>
#include <stdexcept>
#include <vector>

namespace hvd {
namespace {

// Operands whose sum depends on the order: magnitudes from 2^-20 to 2^40, both signs.
double operand(std::mt19937_64& gen) {
  std::uniform_real_distribution<double> mant(1.0, 2.0);
  std::uniform_int_distribution<int> exp(-20, 40);
  std::bernoulli_distribution neg(0.5);
  const double v = std::ldexp(mant(gen), exp(gen));
  return neg(gen) ? -v : v;
}

template <class T>
std::vector<T> make_blocks(size_t k, size_t n, uint64_t seed) {
  std::mt19937_64 gen(seed);
  std::vector<T> v(k * n);
  for (auto& x : v) x = static_cast<T>(operand(gen));
  return v;
}

template <class T>
T fold(const std::vector<T>& blocks, size_t k, size_t n, size_t i, ReduceOp op) {
  double acc = static_cast<double>(blocks[i]);
  for (size_t j = 1; j < k; ++j) {
    const double x = static_cast<double>(blocks[j * n + i]);
    acc = op == ReduceOp::kProduct ? acc * x : acc + x;
  }
  return static_cast<T>(acc);
}

template <class T>
void check_wide(DataType dtype) {
  for (ReduceOp op : {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kProduct}) {
    for (size_t k = 1; k <= 5; ++k) {
      for (size_t n : {size_t{0}, size_t{1}, size_t{7}, size_t{1023}, size_t{1024}, size_t{2500}}) {
        std::vector<T> blocks = make_blocks<T>(k, n, 1000 * k + n);
        std::vector<T> out(n);
        reduce_blocks_ordered(dtype, op, blocks.data(), k, n, n, out.data());
        for (size_t i = 0; i < n; ++i) {
          const T want = fold(blocks, k, n, i, op);
          ASSERT_EQ(std::memcmp(&out[i], &want, sizeof(T)), 0)
              << static_cast<int>(dtype) << " k=" << k << " n=" << n << " i=" << i << ": " << out[i]
              << " != " << want;
        }
        // In place, into block 0 (as the all-reduce's scratch may be).
        std::vector<T> in_place = blocks;
        reduce_blocks_ordered(dtype, op, in_place.data(), k, n, n, in_place.data());
        // (n == 0: empty vectors, whose data() may be null, which memcmp must not be given.)
        ASSERT_TRUE(n == 0 || std::memcmp(in_place.data(), out.data(), n * sizeof(T)) == 0);
      }
    }
  }
}

TEST(OrderedReduction, Float32MatchesTheRankOrderFold) { check_wide<float>(DataType::kFloat32); }
TEST(OrderedReduction, Float64MatchesTheRankOrderFold) { check_wide<double>(DataType::kFloat64); }

// The 16-bit formats: the fold of the operands' values in double, rounded once.
TEST(OrderedReduction, SixteenBitFormatsRoundOnce) {
  for (DataType dtype : {DataType::kFloat16, DataType::kBFloat16}) {
    const bool half = dtype == DataType::kFloat16;
    const size_t k = 4, n = 1500;
    std::mt19937_64 gen(7);
    std::uniform_real_distribution<float> value(-8.0f, 8.0f);
    std::vector<uint16_t> blocks(k * n);
    for (auto& b : blocks) b = half ? float_to_half(value(gen)) : float_to_bfloat16(value(gen));
    std::vector<uint16_t> out(n);
    reduce_blocks_ordered(dtype, ReduceOp::kSum, blocks.data(), k, n, n, out.data());
    for (size_t i = 0; i < n; ++i) {
      double acc = 0;
      for (size_t j = 0; j < k; ++j)
        acc += half ? half_to_float(blocks[j * n + i]) : bfloat16_to_float(blocks[j * n + i]);
      const uint16_t want = half ? double_to_half(acc) : double_to_bfloat16(acc);
      ASSERT_EQ(out[i], want) << static_cast<int>(dtype) << " element " << i;
    }
  }
}

// The point of it: an element's result is its operands' alone. The same operands placed at
// another offset of a longer block (another fusion layout) give the same bits.
TEST(OrderedReduction, ResultDoesNotDependOnPosition) {
  const size_t k = 4, n = 64, shift = 1031, m = n + shift;
  std::vector<double> a = make_blocks<double>(k, n, 99);
  std::vector<double> b = make_blocks<double>(k, m, 100);  // other data around
  for (size_t j = 0; j < k; ++j)
    for (size_t i = 0; i < n; ++i) b[j * m + shift + i] = a[j * n + i];
  std::vector<double> out_a(n), out_b(m);
  reduce_blocks_ordered(DataType::kFloat64, ReduceOp::kSum, a.data(), k, n, n, out_a.data());
  reduce_blocks_ordered(DataType::kFloat64, ReduceOp::kSum, b.data(), k, m, m, out_b.data());
  EXPECT_EQ(std::memcmp(out_a.data(), out_b.data() + shift, n * sizeof(double)), 0);
}

// Only what depends on the order takes the ordered path: integers wrap and min/max pick, exactly
// in any order.
TEST(OrderedReduction, TakesFloatingSumsAndProductsOnly) {
  for (DataType t :
       {DataType::kFloat32, DataType::kFloat64, DataType::kFloat16, DataType::kBFloat16}) {
    EXPECT_TRUE(ordered_reduction(t, ReduceOp::kSum));
    EXPECT_TRUE(ordered_reduction(t, ReduceOp::kAverage));
    EXPECT_TRUE(ordered_reduction(t, ReduceOp::kProduct));
    EXPECT_FALSE(ordered_reduction(t, ReduceOp::kMin));
    EXPECT_FALSE(ordered_reduction(t, ReduceOp::kMax));
  }
  for (DataType t : {DataType::kInt32, DataType::kInt64, DataType::kUInt8})
    EXPECT_FALSE(ordered_reduction(t, ReduceOp::kSum));
  int32_t x[2] = {1, 2}, y = 0;
  EXPECT_THROW(reduce_blocks_ordered(DataType::kInt32, ReduceOp::kSum, x, 2, 1, 1, &y),
               std::invalid_argument);
}

}  // namespace
}  // namespace hvd
