// Mixed precision on the device for the cuDNN model (issue 14.2; gpu/kernels.h, gpu/loss_scaling.h):
//   - the fp32 -> fp16/bf16 cast kernels round exactly as the CPU emulation does
//     (model::round_to_fp16 / round_to_bf16, bitwise, fp16 overflow to +-Inf, NaN kept), and the
//     16 -> 32 cast is exact, so the emulated and the device paths store the same values;
//   - the fp32 master copy is unchanged by the cast to its 16-bit compute copy (bitwise);
//   - a power-of-two loss scale is exact: the loss gradient times 2^k, then unscaled by the
//     device unscale, gives back every gradient bitwise; no overflow is reported;
//   - an Inf or NaN injected into one gradient (or an fp16 overflow made by the cast) is detected,
//     wherever it is in the vector and whatever the launch's grid stride.
// Exits 77 (ctest: skipped) with a message when no CUDA device is visible; runs on device 0.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "gpu/context.h"
#include "gpu/device_buffer.h"
#include "gpu/kernels.h"
#include "gpu/loss_scaling.h"
#include "hvd/error.h"
#include "model/precision.h"

namespace train_cnn::gpu {
namespace {

uint32_t bits(float x) {
  uint32_t b = 0;
  std::memcpy(&b, &x, sizeof b);
  return b;
}

// Values that exercise rounding: random normals over many binades, ties, fp16's subnormal and
// overflow ranges, signed zeros, infinities and NaN.
std::vector<float> test_values() {
  std::vector<float> v = {0.0f,
                          -0.0f,
                          1.0f,
                          -1.0f,
                          65504.0f,               // largest fp16
                          65520.0f,               // rounds to fp16 Inf
                          -1.0e6f,                // fp16 -Inf, fine in bf16
                          6.0e-8f,                // fp16 subnormal
                          1.0e-9f,                // fp16 zero
                          1.0f + 1.0f / 2048.0f,  // fp16 tie, to even
                          1.0f + 1.0f / 256.0f,   // bf16 tie, to even
                          std::numeric_limits<float>::infinity(),
                          -std::numeric_limits<float>::infinity(),
                          std::numeric_limits<float>::quiet_NaN(),
                          std::numeric_limits<float>::max(),
                          std::numeric_limits<float>::denorm_min()};
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-30, 20);
  for (int i = 0; i < 100000; ++i) v.push_back(std::ldexp(mantissa(rng), exponent(rng)));
  return v;
}

template <class T>
DeviceArray<T> upload(const std::vector<T>& host) {
  DeviceArray<T> d(host.size());
  EXPECT_EQ(cudaMemcpy(d.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
            cudaSuccess);
  return d;
}

template <class T>
std::vector<T> download(const DeviceArray<T>& d, size_t n) {
  std::vector<T> host(n);
  EXPECT_EQ(cudaMemcpy(host.data(), d.data(), n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return host;
}

void expect_same_bits(const std::vector<float>& got, const std::vector<float>& want,
                      const char* what) {
  ASSERT_EQ(got.size(), want.size());
  int bad = 0;
  for (size_t i = 0; i < got.size() && bad < 10; ++i) {
    const bool same = (std::isnan(got[i]) && std::isnan(want[i])) || bits(got[i]) == bits(want[i]);
    if (!same) {
      ++bad;
      ADD_FAILURE() << what << " [" << i << "]: got " << got[i] << ", want " << want[i];
    }
  }
}

class CastTest : public testing::TestWithParam<HalfFormat> {};

TEST_P(CastTest, RoundsAsTheCpuEmulationAndLeavesTheMasterCopy) {
  const HalfFormat format = GetParam();
  const std::vector<float> master = test_values();
  const auto n = static_cast<int64_t>(master.size());
  DeviceArray<float> d_master = upload(master);
  DeviceArray<uint16_t> d_half(master.size());
  DeviceArray<float> d_back(master.size());
  cast_float_to_half(d_master.data(), d_half.data(), n, format, nullptr);
  cast_half_to_float(d_half.data(), d_back.data(), n, format, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  std::vector<float> want = master;
  model::round_to_precision(
      format == HalfFormat::kFp16 ? model::Precision::kFp16 : model::Precision::kBf16, want);
  expect_same_bits(download(d_back, master.size()), want, "16-bit round trip");
  expect_same_bits(download(d_master, master.size()), master, "fp32 master after the cast");

  // round_to_half: the same values in place.
  DeviceArray<float> d_inplace = upload(master);
  round_to_half(d_inplace.data(), n, format, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  expect_same_bits(download(d_inplace, master.size()), want, "round_to_half");
}

INSTANTIATE_TEST_SUITE_P(Formats, CastTest, testing::Values(HalfFormat::kFp16, HalfFormat::kBf16),
                         [](const testing::TestParamInfo<HalfFormat>& info) {
                           return info.param == HalfFormat::kFp16 ? "fp16" : "bf16";
                         });

// Gradients well inside float's normal range after scaling by 2^16 and before.
std::vector<float> gradients(size_t n) {
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> mantissa(-1.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-40, 10);
  std::vector<float> g(n);
  for (float& x : g) x = std::ldexp(mantissa(rng), exponent(rng));
  return g;
}

TEST(LossScaling, PowerOfTwoScaleIsExact) {
  const std::vector<float> grads = gradients(1 << 20);
  const auto n = static_cast<int64_t>(grads.size());
  DeviceArray<float> d = upload(grads);
  for (const double scale : {1.0, 2.0, 1024.0, 65536.0, 16777216.0}) {
    scale_in_place(d.data(), n, static_cast<float>(scale), nullptr);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    const std::vector<float> scaled = download(d, grads.size());
    for (size_t i = 0; i < grads.size(); i += 4099) {
      ASSERT_EQ(scaled[i], static_cast<float>(grads[i] * scale))
          << "scale " << scale << " [" << i << "]";
    }
    DeviceGradientUnscaler unscaler;
    EXPECT_FALSE(unscaler.unscale(d.data(), n, scale, nullptr)) << "scale " << scale;
    expect_same_bits(download(d, grads.size()), grads, "unscaled gradients");
  }
}

TEST(LossScaling, InjectedOverflowIsDetected) {
  const std::vector<float> grads = gradients(300007);  // not a multiple of the block size
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  DeviceGradientUnscaler unscaler;
  for (const size_t at : {size_t{0}, size_t{12345}, grads.size() - 1}) {
    for (const float bad : {inf, -inf, nan}) {
      std::vector<float> g = grads;
      g[at] = bad;
      DeviceArray<float> d = upload(g);
      EXPECT_TRUE(unscaler.unscale(d.data(), static_cast<int64_t>(g.size()), 1024.0, nullptr))
          << "value " << bad << " at " << at;
    }
    // The flag is cleared between calls: a clean vector right after an overflow passes.
    DeviceArray<float> clean = upload(grads);
    EXPECT_FALSE(
        unscaler.unscale(clean.data(), static_cast<int64_t>(grads.size()), 1024.0, nullptr));
  }
  // An fp16 overflow made by the cast (a gradient scaled past 65504) reaches the check as Inf.
  std::vector<float> g = grads;
  g[77] = 70000.0f;
  DeviceArray<float> d = upload(g);
  round_to_half(d.data(), static_cast<int64_t>(g.size()), HalfFormat::kFp16, nullptr);
  EXPECT_TRUE(unscaler.unscale(d.data(), static_cast<int64_t>(g.size()), 65536.0, nullptr));
  // n = 0 is fine; a bad scale is refused.
  EXPECT_FALSE(unscaler.unscale(nullptr, 0, 2.0, nullptr));
  EXPECT_THROW(unscaler.unscale(d.data(), 1, 0.0, nullptr), hvd::InvalidArgumentError);
  EXPECT_THROW(unscaler.unscale(d.data(), 1, inf, nullptr), hvd::InvalidArgumentError);
}

}  // namespace
}  // namespace train_cnn::gpu

int main(int argc, char** argv) {
  if (train_cnn::gpu::device_count() == 0) {
    std::printf(
        "SKIPPED: no CUDA device visible; test_cnn_cudnn_precision runs the mixed-precision "
        "kernels on a GPU.\n");
    std::fflush(stdout);
    return 77;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
