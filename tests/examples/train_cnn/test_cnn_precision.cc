// The CPU model's emulated mixed precision (examples/train_cnn/model/precision.h): the bf16 and
// fp16 roundings against hvd's own conversions (common/dtype_math.h, an independent
// implementation), and the model with --precision bf16/fp16: 16-bit logits and gradients, fp32
// master weights left alone, the loss scale applied exactly (a power of two commutes with the
// rounding) and fp16 overflow to Inf at a scale too large.
#include <gtest/gtest.h>

#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "common/dtype_math.h"
#include "hvd/error.h"
#include "model/init.h"
#include "model/model.h"
#include "model/precision.h"

namespace cm = train_cnn::model;

namespace {

bool same_bits(float a, float b) {
  return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
}

// Floats that exercise every branch: zeros, the fp16 subnormal/normal boundary and ties, the
// largest finite halves, the rounding to Inf, float extremes, and random bit patterns.
std::vector<float> probe_values() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.5f,
                          65504.0f,
                          65519.99f,
                          65520.0f,
                          -65520.0f,
                          70000.0f,
                          6.103515625e-05f,  // 2^-14, smallest normal half
                          6.0975552e-05f,    // largest subnormal half
                          5.9604645e-08f,    // 2^-24, smallest subnormal half
                          2.9802322e-08f,    // 2^-25: a tie, to zero
                          4.4703484e-08f,    // 1.5 x 2^-24: a tie, to 2^-23
                          1.0009765625f,     // 1 + 2^-10
                          1.00048828125f,    // 1 + 2^-11: a tie, to even (1)
                          1.00146484375f,    // 1 + 3 x 2^-11: a tie, to even (1 + 2^-9)
                          1.00390625f,       // 1 + 2^-8
                          1.001953125f,      // 1 + 2^-9: a bf16 tie
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::min(),
                          std::numeric_limits<float>::denorm_min(),
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity()};
  std::mt19937 rng(3);
  for (int i = 0; i < 200000; ++i) v.push_back(std::bit_cast<float>(static_cast<uint32_t>(rng())));
  // Dense sampling around the fp16 range (exponents 2^-26 .. 2^17).
  std::uniform_int_distribution<uint32_t> near(0x32800000u, 0x48000000u);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t u = near(rng) | (i % 2 ? 0x80000000u : 0u);
    v.push_back(std::bit_cast<float>(u));
  }
  return v;
}

TEST(CnnPrecision, Bf16RoundingMatchesHvdsConversion) {
  for (float x : probe_values()) {
    const float want = hvd::bfloat16_to_float(hvd::float_to_bfloat16(x));
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(cm::round_to_bf16(x)));  // payloads may differ
      continue;
    }
    ASSERT_TRUE(same_bits(cm::round_to_bf16(x), want))
        << x << " -> " << cm::round_to_bf16(x) << ", hvd: " << want;
  }
  EXPECT_TRUE(std::isnan(cm::round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
}

TEST(CnnPrecision, Fp16RoundingMatchesHvdsConversion) {
  for (float x : probe_values()) {
    const float want = hvd::half_to_float(hvd::float_to_half(x));
    if (std::isnan(x)) {
      ASSERT_TRUE(std::isnan(cm::round_to_fp16(x)));  // payloads may differ
      continue;
    }
    ASSERT_TRUE(same_bits(cm::round_to_fp16(x), want))
        << x << " -> " << cm::round_to_fp16(x) << ", hvd: " << want;
  }
  EXPECT_TRUE(std::isnan(cm::round_to_fp16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_EQ(cm::round_to_fp16(65519.0f), 65504.0f);
  EXPECT_TRUE(std::isinf(cm::round_to_fp16(65520.0f)));
}

TEST(CnnPrecision, NamesParseBackAndOthersAreRefused) {
  for (cm::Precision p : {cm::Precision::kFp32, cm::Precision::kBf16, cm::Precision::kFp16})
    EXPECT_EQ(cm::parse_precision(cm::precision_name(p)), p);
  try {
    cm::parse_precision("fp8");
    FAIL() << "fp8 was accepted";
  } catch (const hvd::InvalidArgumentError& e) {
    EXPECT_STREQ(e.what(), "--precision is 'fp8': it must be one of fp32, bf16, fp16.");
  }
}

// A small network of the model's structure.
cm::ModelOptions small_options(cm::Precision p) {
  cm::ModelOptions o;
  o.height = 8;
  o.width = 8;
  o.conv1_channels = 3;
  o.conv2_channels = 4;
  o.kernel = 3;
  o.hidden = 6;
  o.num_classes = 5;
  o.precision = p;
  return o;
}

struct Step {
  std::vector<float> logits, grads, params;
  double loss = 0;
};

Step run_step(cm::Precision p, float loss_scale, uint64_t seed = 5) {
  cm::Model m(small_options(p));
  m.initialize(seed);
  m.set_loss_scale(loss_scale);
  const int batch = 7;
  cm::InitRng rng(seed + 1);
  std::vector<float> images(static_cast<size_t>(batch * m.input_size()));
  for (float& x : images) x = static_cast<float>(rng.uniform01());
  std::vector<int32_t> labels(batch);
  for (int i = 0; i < batch; ++i) labels[i] = i % 5;
  m.zero_gradients();
  Step s;
  s.loss = m.forward(images, labels, batch).loss;
  m.backward();
  s.logits.assign(m.logits().begin(), m.logits().end());
  s.grads.assign(m.flat_gradients().begin(), m.flat_gradients().end());
  s.params.assign(m.flat_parameters().begin(), m.flat_parameters().end());
  return s;
}

bool representable(cm::Precision p, float x) {
  return same_bits(p == cm::Precision::kBf16 ? cm::round_to_bf16(x) : cm::round_to_fp16(x), x);
}

TEST(CnnPrecisionModel, SixteenBitLogitsAndGradientsWithFp32MasterWeights) {
  const Step fp32 = run_step(cm::Precision::kFp32, 1.0f);
  for (cm::Precision p : {cm::Precision::kBf16, cm::Precision::kFp16}) {
    const Step s = run_step(p, 1.0f);
    for (float x : s.logits) ASSERT_TRUE(representable(p, x)) << cm::precision_name(p) << " " << x;
    for (float x : s.grads) ASSERT_TRUE(representable(p, x)) << cm::precision_name(p) << " " << x;
    // The master weights are the float32 initialisation, not rounded (He normal values are not
    // representable in 16 bits in general).
    ASSERT_EQ(s.params.size(), fp32.params.size());
    EXPECT_EQ(0, std::memcmp(s.params.data(), fp32.params.data(), s.params.size() * 4));
    int unrepresentable = 0;
    for (float x : s.params) unrepresentable += representable(p, x) ? 0 : 1;
    EXPECT_GT(unrepresentable, 0) << "the master weights must stay float32";
    // Close to float32, but not equal: the rounding happened.
    double worst = 0;
    bool differs = false;
    for (size_t i = 0; i < s.grads.size(); ++i) {
      worst = std::max(worst, static_cast<double>(std::fabs(s.grads[i] - fp32.grads[i])));
      differs |= !same_bits(s.grads[i], fp32.grads[i]);
    }
    EXPECT_TRUE(differs) << cm::precision_name(p);
    EXPECT_LT(worst, p == cm::Precision::kBf16 ? 5e-2 : 5e-3) << cm::precision_name(p);
    EXPECT_NEAR(s.loss, fp32.loss, p == cm::Precision::kBf16 ? 2e-2 : 2e-3);
  }
}

TEST(CnnPrecisionModel, APowerOfTwoLossScaleScalesEveryGradientExactly) {
  for (cm::Precision p : {cm::Precision::kBf16, cm::Precision::kFp16}) {
    const Step one = run_step(p, 1.0f), scaled = run_step(p, 256.0f);
    EXPECT_EQ(one.logits, scaled.logits) << "the forward pass does not see the scale";
    EXPECT_EQ(one.loss, scaled.loss);
    for (size_t i = 0; i < one.grads.size(); ++i) {
      // fp16: values below its normal range lose bits without the scale; bf16 has float's range.
      if (p == cm::Precision::kFp16 && std::fabs(one.grads[i]) < 6.2e-5f) continue;
      ASSERT_TRUE(same_bits(one.grads[i] * 256.0f, scaled.grads[i]))
          << cm::precision_name(p) << " gradient " << i << ": " << one.grads[i] << " x 256 vs "
          << scaled.grads[i];
    }
  }
}

TEST(CnnPrecisionModel, Fp16OverflowsToInfinityWhenTheScaleIsTooLarge) {
  const float huge = 1073741824.0f;  // 2^30
  const Step s = run_step(cm::Precision::kFp16, huge);
  int inf = 0;
  for (float x : s.grads) inf += std::isfinite(x) ? 0 : 1;  // Inf, and NaN from Inf x 0
  EXPECT_GT(inf, 0) << "gradients x 2^30 must overflow fp16 (Inf or NaN)";
  const Step bf = run_step(cm::Precision::kBf16, huge);
  for (float x : bf.grads) ASSERT_TRUE(std::isfinite(x)) << "bf16 has float32's range";
}

}  // namespace
