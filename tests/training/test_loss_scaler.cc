// hvd::LossScaler without MPI: the dynamic schedule (growth after growth_interval good steps,
// backoff after an overflow, the min/max clamps, a static scale), the local unscale-and-check on
// every floating dtype, option checking and restore(). The agreement across ranks is
// tests/training/test_loss_scaler_ranks.cc.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "common/dtype_math.h"
#include "hvd/error.h"
#include "hvd/loss_scaler.h"

namespace {

template <class T>
hvd::TensorRef ref(std::vector<T>& v, hvd::DataType dtype) {
  return hvd::TensorRef(v.data(), dtype, {static_cast<int64_t>(v.size())});
}

hvd::LossScalerOptions small(int64_t interval) {
  hvd::LossScalerOptions o;
  o.initial_scale = 1024;
  o.growth_interval = interval;
  o.min_scale = 1;
  o.max_scale = 8192;
  return o;
}

TEST(LossScalerSchedule, DefaultsAreTwoToTheSixteenGrowingEvery2000StepsByTwo) {
  hvd::LossScaler s;
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.options().growth_interval, 2000);
  for (int i = 0; i < 1999; ++i) s.advance(false);
  EXPECT_EQ(s.scale(), 65536.0);
  EXPECT_EQ(s.good_steps(), 1999);
  s.advance(false);
  EXPECT_EQ(s.scale(), 131072.0);
  EXPECT_EQ(s.good_steps(), 0);
}

TEST(LossScalerSchedule, GrowsAfterExactlyIntervalGoodStepsInARow) {
  hvd::LossScaler s(small(3));
  s.advance(false);
  s.advance(false);
  EXPECT_EQ(s.scale(), 1024.0) << "two good steps of three";
  s.advance(false);
  EXPECT_EQ(s.scale(), 2048.0);
  EXPECT_EQ(s.good_steps(), 0) << "the count restarts after growing";
  for (int i = 0; i < 3; ++i) s.advance(false);
  EXPECT_EQ(s.scale(), 4096.0);
  EXPECT_EQ(s.skipped_steps(), 0);
}

TEST(LossScalerSchedule, OverflowHalvesTheScaleAndRestartsTheGoodStepCount) {
  hvd::LossScaler s(small(3));
  s.advance(false);
  s.advance(false);
  s.advance(true);
  EXPECT_EQ(s.scale(), 512.0);
  EXPECT_EQ(s.good_steps(), 0);
  EXPECT_EQ(s.skipped_steps(), 1);
  // Two good steps before the overflow no longer count: three more are needed to grow.
  s.advance(false);
  s.advance(false);
  EXPECT_EQ(s.scale(), 512.0);
  s.advance(false);
  EXPECT_EQ(s.scale(), 1024.0);
  // Overflows in a row keep halving.
  s.advance(true);
  s.advance(true);
  s.advance(true);
  EXPECT_EQ(s.scale(), 128.0);
  EXPECT_EQ(s.skipped_steps(), 4);
}

TEST(LossScalerSchedule, ScaleStaysWithinMinAndMax) {
  hvd::LossScalerOptions o = small(1);
  o.initial_scale = 4;
  o.min_scale = 2;
  o.max_scale = 16;
  hvd::LossScaler s(o);
  s.advance(true);
  EXPECT_EQ(s.scale(), 2.0);
  s.advance(true);
  EXPECT_EQ(s.scale(), 2.0) << "not below min_scale";
  for (int i = 0; i < 10; ++i) s.advance(false);
  EXPECT_EQ(s.scale(), 16.0) << "not above max_scale";
  // A backoff factor that does not land on min_scale is clamped to it.
  o.initial_scale = 3;
  o.backoff_factor = 0.5;
  hvd::LossScaler t(o);
  t.advance(true);
  EXPECT_EQ(t.scale(), 2.0);
}

TEST(LossScalerSchedule, OtherFactorsAreApplied) {
  hvd::LossScalerOptions o = small(2);
  o.growth_factor = 4;
  o.backoff_factor = 0.25;
  hvd::LossScaler s(o);
  s.advance(false);
  s.advance(false);
  EXPECT_EQ(s.scale(), 4096.0);
  s.advance(true);
  EXPECT_EQ(s.scale(), 1024.0);
}

TEST(LossScalerSchedule, StaticScaleNeverMovesButOverflowsAreStillCounted) {
  hvd::LossScalerOptions o = small(1);
  o.dynamic = false;
  o.initial_scale = 128;
  hvd::LossScaler s(o);
  for (int i = 0; i < 5; ++i) s.advance(false);
  s.advance(true);
  s.advance(true);
  EXPECT_EQ(s.scale(), 128.0);
  EXPECT_EQ(s.skipped_steps(), 2);
}

TEST(LossScalerSchedule, MatchesAnIndependentModelOverARandomRun) {
  // 5000 steps with overflows at random (p = 0.02): the scaler against the rule written out here.
  hvd::LossScalerOptions o = small(25);
  o.max_scale = 1 << 20;
  hvd::LossScaler s(o);
  std::mt19937 rng(7);
  std::bernoulli_distribution overflow(0.02);
  double scale = o.initial_scale;
  int64_t run = 0, skipped = 0;
  for (int step = 0; step < 5000; ++step) {
    const bool bad = overflow(rng);
    s.advance(bad);
    if (bad) {
      scale = std::max(o.min_scale, scale / 2);
      run = 0;
      ++skipped;
    } else if (++run == o.growth_interval) {
      scale = std::min(o.max_scale, scale * 2);
      run = 0;
    }
    ASSERT_EQ(s.scale(), scale) << "step " << step;
    ASSERT_EQ(s.good_steps(), run) << "step " << step;
  }
  EXPECT_EQ(s.skipped_steps(), skipped);
  EXPECT_GT(skipped, 50);
}

TEST(LossScalerUnscale, Float32IsDividedExactlyAndFiniteValuesReportNoOverflow) {
  hvd::LossScaler s(small(10));
  std::vector<float> a{1024.0f, -3072.0f, 0.0f, 1.5f, 7.0f}, b{2048.0f};
  EXPECT_FALSE(s.unscale({ref(a, hvd::DataType::kFloat32), ref(b, hvd::DataType::kFloat32)}));
  EXPECT_EQ(a, (std::vector<float>{1.0f, -3.0f, 0.0f, 1.5f / 1024, 7.0f / 1024}));
  EXPECT_EQ(b[0], 2.0f);
  EXPECT_FALSE(s.unscale({})) << "no gradients: nothing overflowed";
}

TEST(LossScalerUnscale, InfinityOrNanInAnyTensorIsAnOverflow) {
  hvd::LossScaler s(small(10));
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    std::vector<float> a{1, 2, 3}, b{4, bad, 6};
    EXPECT_TRUE(s.unscale({ref(a, hvd::DataType::kFloat32), ref(b, hvd::DataType::kFloat32)}))
        << bad;
  }
  // A finite value that overflows float32 when unscaled by a scale below 1.
  hvd::LossScalerOptions o = small(10);
  o.initial_scale = 0.5;
  o.min_scale = 0.25;
  hvd::LossScaler below_one(o);
  std::vector<float> big{std::numeric_limits<float>::max()};
  EXPECT_TRUE(below_one.unscale({ref(big, hvd::DataType::kFloat32)}));
}

TEST(LossScalerUnscale, SixteenBitAndFloat64TensorsAreUnscaledInPlace) {
  hvd::LossScaler s(small(10));
  std::vector<uint16_t> h{hvd::float_to_half(2048.0f), hvd::float_to_half(-512.0f)};
  std::vector<uint16_t> bf{hvd::float_to_bfloat16(4096.0f), hvd::float_to_bfloat16(3.0f)};
  std::vector<double> d{1024.0, 1.0};
  EXPECT_FALSE(s.unscale({ref(h, hvd::DataType::kFloat16), ref(bf, hvd::DataType::kBFloat16),
                          ref(d, hvd::DataType::kFloat64)}));
  EXPECT_EQ(hvd::half_to_float(h[0]), 2.0f);
  EXPECT_EQ(hvd::half_to_float(h[1]), -0.5f);
  EXPECT_EQ(hvd::bfloat16_to_float(bf[0]), 4.0f);
  EXPECT_EQ(hvd::bfloat16_to_float(bf[1]), 3.0f / 1024);
  EXPECT_EQ(d, (std::vector<double>{1.0, 1.0 / 1024}));
  std::vector<uint16_t> inf{hvd::float_to_half(std::numeric_limits<float>::infinity())};
  EXPECT_TRUE(s.unscale({ref(inf, hvd::DataType::kFloat16)}));
  std::vector<uint16_t> nan{hvd::float_to_bfloat16(std::numeric_limits<float>::quiet_NaN())};
  EXPECT_TRUE(s.unscale({ref(nan, hvd::DataType::kBFloat16)}));
}

TEST(LossScalerUnscale, IntegerGradientsAreRefusedNamingTheTensor) {
  hvd::LossScaler s(small(10));
  std::vector<float> f{1};
  std::vector<int32_t> i{1};
  try {
    s.unscale({ref(f, hvd::DataType::kFloat32), ref(i, hvd::DataType::kInt32)});
    FAIL() << "an int32 gradient was accepted";
  } catch (const hvd::InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("gradient 1 has dtype int32"), std::string::npos)
        << e.what();
  }
}

TEST(LossScalerOptions, ValuesOutOfRangeAreRefusedNamingTheField) {
  auto refused = [](hvd::LossScalerOptions o, const std::string& field) {
    try {
      hvd::LossScaler s(o);
      ADD_FAILURE() << field << ": accepted";
    } catch (const hvd::InvalidArgumentError& e) {
      EXPECT_NE(std::string(e.what()).find("LossScalerOptions::" + field + " is"),
                std::string::npos)
          << e.what();
    }
  };
  hvd::LossScalerOptions o;
  o.initial_scale = 0;
  refused(o, "initial_scale");
  o = {};
  o.initial_scale = std::numeric_limits<double>::infinity();
  refused(o, "initial_scale");
  o = {};
  o.initial_scale = 1 << 30;  // above max_scale
  refused(o, "initial_scale");
  o = {};
  o.min_scale = -1;
  refused(o, "min_scale");
  o = {};
  o.max_scale = 0.5;  // below min_scale
  refused(o, "max_scale");
  o = {};
  o.growth_factor = 0.5;
  refused(o, "growth_factor");
  o = {};
  o.backoff_factor = 0;
  refused(o, "backoff_factor");
  o = {};
  o.backoff_factor = 2;
  refused(o, "backoff_factor");
  o = {};
  o.growth_interval = 0;
  refused(o, "growth_interval");
  o = {};
  o.name = "";
  refused(o, "name");
}

TEST(LossScalerRestore, ContinuesTheScheduleAndRefusesImpossibleState) {
  hvd::LossScaler s(small(4));
  s.restore(256, 3);
  EXPECT_EQ(s.scale(), 256.0);
  EXPECT_EQ(s.good_steps(), 3);
  s.advance(false);
  EXPECT_EQ(s.scale(), 512.0) << "the restored count of good steps carries on";
  EXPECT_THROW(s.restore(0.5, 0), hvd::InvalidArgumentError);   // below min_scale
  EXPECT_THROW(s.restore(1e9, 0), hvd::InvalidArgumentError);   // above max_scale
  EXPECT_THROW(s.restore(256, 4), hvd::InvalidArgumentError);   // a full interval
  EXPECT_THROW(s.restore(256, -1), hvd::InvalidArgumentError);  // negative
}

}  // namespace

// A gradient on a device this process cannot reach (cuda:64: no machine has it) is refused by name
// before any gradient is changed, in a build with CUDA or without.
TEST(LossScalerUnscale, UnreachableDeviceGradientIsNamedAndNothingIsChanged) {
  hvd::LossScaler scaler(small(10));
  std::vector<float> cpu = {1024.f, 2048.f};
  float fake = 0;  // never dereferenced
  const std::vector<hvd::TensorRef> grads = {
      ref(cpu, hvd::DataType::kFloat32),
      hvd::TensorRef(&fake, hvd::DataType::kFloat32, {1}, hvd::Device::cuda(64))};
  try {
    scaler.unscale(grads);
    ADD_FAILURE() << "no error";
  } catch (const hvd::InvalidArgumentError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("gradient 1"), std::string::npos) << msg;
    EXPECT_NE(msg.find("cuda:64"), std::string::npos) << msg;
  }
  EXPECT_EQ(cpu, (std::vector<float>{1024.f, 2048.f}));
}
