// Mixed precision on the device for the cuDNN model (issue 14.2; gpu/kernels.h, and
// hvd::LossScaler::unscale on device tensors, training/device.h):
//   - the fp32 -> fp16/bf16 cast kernels round exactly as the CPU emulation does
//     (model::round_to_fp16 / round_to_bf16, bitwise, fp16 overflow to +-Inf, NaN kept), and the
//     16 -> 32 cast is exact, so the emulated and the device paths store the same values;
//   - the fp32 master copy is unchanged by the cast to its 16-bit compute copy (bitwise);
//   - a power-of-two loss scale is exact: the loss gradient times 2^k, then unscaled by the
//     device unscale, gives back every gradient bitwise; no overflow is reported;
//   - an Inf or NaN injected into one gradient (or an fp16 overflow made by the cast) is detected,
//     wherever it is in the vector and whatever the launch's grid stride;
//   - the cuDNN model in bf16 and fp16 (16-bit activations, gradients and compute weights on
//     tensor cores) gives the CPU model's emulation of the same storage (model/precision.h) its
//     loss, logits and every gradient within the tolerances of kMixedTolerance (same weights, same
//     batch, a loss scale of 1024), its gradients are 16-bit values widened to float32, and the
//     fp32 master weights are untouched by the step;
//   - an overflow (fp16: the loss scale 2^24 overflows the 16-bit loss gradient; bf16: an Inf put
//     into one gradient) is caught by the device unscale, the step is skipped (the weights stay
//     bitwise) and the dynamic scale halves;
//   - 300 steps of mixed-precision training with dynamic loss scaling on a learnable synthetic set
//     bring the loss below half its start, in both formats.
// Exits 77 (ctest: skipped) with a message when no CUDA device is visible; runs on device 0.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "gpu/context.h"
#include "gpu/cudnn_model.h"
#include "gpu/device_buffer.h"
#include "gpu/kernels.h"
#include "gpu/relu.h"
#include "gpu/sgd_momentum.h"
#include "hvd/error.h"
#include "hvd/loss_scaler.h"
#include "model/model.h"
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

// The library's device unscale (hvd::LossScaler::unscale on a CUDA tensor) of n floats on
// device 0 at `scale`: true when any was Inf or NaN. A scale that is not finite and > 0 throws
// hvd::InvalidArgumentError (the scaler refuses it).
bool unscale(float* grads, int64_t n, double scale, cudaStream_t stream) {
  const hvd::LossScaler scaler({.initial_scale = scale,
                                .min_scale = std::min(1.0, scale),
                                .max_scale = std::max(16777216.0, scale)});
  return scaler.unscale({hvd::TensorRef(grads, hvd::DataType::kFloat32, {n}, hvd::Device::cuda(0),
                                        static_cast<void*>(stream))});
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
    EXPECT_FALSE(unscale(d.data(), n, scale, nullptr)) << "scale " << scale;
    expect_same_bits(download(d, grads.size()), grads, "unscaled gradients");
  }
}

TEST(LossScaling, InjectedOverflowIsDetected) {
  const std::vector<float> grads = gradients(300007);  // not a multiple of the block size
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (const size_t at : {size_t{0}, size_t{12345}, grads.size() - 1}) {
    for (const float bad : {inf, -inf, nan}) {
      std::vector<float> g = grads;
      g[at] = bad;
      DeviceArray<float> d = upload(g);
      EXPECT_TRUE(unscale(d.data(), static_cast<int64_t>(g.size()), 1024.0, nullptr))
          << "value " << bad << " at " << at;
    }
    // The flag is cleared between calls: a clean vector right after an overflow passes.
    DeviceArray<float> clean = upload(grads);
    EXPECT_FALSE(unscale(clean.data(), static_cast<int64_t>(grads.size()), 1024.0, nullptr));
  }
  // An fp16 overflow made by the cast (a gradient scaled past 65504) reaches the check as Inf.
  std::vector<float> g = grads;
  g[77] = 70000.0f;
  DeviceArray<float> d = upload(g);
  round_to_half(d.data(), static_cast<int64_t>(g.size()), HalfFormat::kFp16, nullptr);
  EXPECT_TRUE(unscale(d.data(), static_cast<int64_t>(g.size()), 65536.0, nullptr));
  // n = 0 is fine; a bad scale is refused.
  EXPECT_FALSE(unscale(nullptr, 0, 2.0, nullptr));
  EXPECT_THROW(unscale(d.data(), 1, 0.0, nullptr), hvd::InvalidArgumentError);
  EXPECT_THROW(unscale(d.data(), 1, inf, nullptr), hvd::InvalidArgumentError);
}

// ReLU on 16-bit values, by CudnnRelu (cuDNN with a 16-bit descriptor, or its own kernels where
// cuDNN refuses the type) and by the kernels directly: bitwise the CPU ReLU of the same values,
// in place, NaN kept, the backward pass routing dy where y > 0.
TEST_P(CastTest, SixteenBitReluMatchesTheCpuReluBitwiseInPlace) {
  const HalfFormat format = GetParam();
  const model::Precision precision =
      format == HalfFormat::kFp16 ? model::Precision::kFp16 : model::Precision::kBf16;
  const int channels = 3, height = 5, width = 7, batch = 4;
  const size_t n = static_cast<size_t>(channels) * height * width * batch;
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> x(n), dy(n);
  for (float& v : x) v = u(rng);
  for (float& v : dy) v = u(rng);
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = std::numeric_limits<float>::quiet_NaN();
  model::round_to_precision(precision, x);
  model::round_to_precision(precision, dy);
  std::vector<float> want_y(n), want_dx(n);
  for (size_t i = 0; i < n; ++i) {
    want_y[i] = std::isnan(x[i]) ? x[i] : (x[i] > 0.0f ? x[i] : 0.0f);
    want_dx[i] = want_y[i] > 0.0f ? dy[i] : 0.0f;
  }
  CudaContext ctx({.device = 0});
  DeviceArray<float> d_x = upload(x), d_dy = upload(dy), d_back(n);
  DeviceArray<uint16_t> h_x(n), h_dy(n);
  for (int own = 0; own < 2; ++own) {
    SCOPED_TRACE(own ? "relu_forward_half / relu_backward_half" : "CudnnRelu");
    cast_float_to_half(d_x.data(), h_x.data(), static_cast<int64_t>(n), format, ctx.stream());
    cast_float_to_half(d_dy.data(), h_dy.data(), static_cast<int64_t>(n), format, ctx.stream());
    if (own) {
      relu_forward_half(h_x.data(), h_x.data(), static_cast<int64_t>(n), format, ctx.stream());
    } else {
      CudnnRelu relu(ctx, channels, height, width, precision);
      relu.forward(h_x.data(), h_x.data(), batch);
      ctx.synchronize();
    }
    cast_half_to_float(h_x.data(), d_back.data(), static_cast<int64_t>(n), format, ctx.stream());
    ctx.synchronize();
    // -0 may come back as +0 or -0 (both are "not > 0"): compare values, NaN as NaN.
    std::vector<float> y = download(d_back, n);
    for (size_t i = 0; i < n; ++i) {
      if (y[i] == 0.0f) y[i] = 0.0f;
    }
    expect_same_bits(y, want_y, "ReLU forward");
    if (own) {
      relu_backward_half(h_x.data(), h_dy.data(), h_dy.data(), static_cast<int64_t>(n), format,
                         ctx.stream());
    } else {
      CudnnRelu relu(ctx, channels, height, width, precision);
      relu.backward(h_x.data(), h_dy.data(), h_dy.data(), batch);
    }
    cast_half_to_float(h_dy.data(), d_back.data(), static_cast<int64_t>(n), format, ctx.stream());
    ctx.synchronize();
    std::vector<float> dx = download(d_back, n);
    for (size_t i = 0; i < n; ++i) {
      if (dx[i] == 0.0f) dx[i] = 0.0f;
    }
    dx[2] = want_dx[2];  // below a NaN activation, cuDNN may propagate the NaN or not
    expect_same_bits(dx, want_dx, "ReLU backward");
  }
}

// ---- The cuDNN model in bf16 / fp16 against the CPU emulation ----------------------------------

model::Precision precision_of(HalfFormat f) {
  return f == HalfFormat::kFp16 ? model::Precision::kFp16 : model::Precision::kBf16;
}

// How far the GPU model may be from the CPU emulation of the same 16-bit storage. Both round every
// stored value to the same format, but the sums before each rounding run in different orders
// (cuDNN and cuBLAS tensor-core kernels against im2col + OpenBLAS), so a value near a rounding
// boundary lands one 16-bit ulp apart (2^-8 relative for bf16, 2^-11 for fp16), the GPU's bias is
// added after the convolution's own rounding (one more rounding than the CPU), and the differences
// grow through the layers; a pre-activation within that distance of zero may also take the other
// ReLU branch. The bounds are a few ulps of each format: relative to the largest reference value
// (logits), relative to max(1, loss), and in L2 relative to the reference norm (gradients, for
// which a single flipped unit moves one element by a lot but the norm little). A wiring mistake
// (a wrong type, scale or layout) is off by O(1). Measured values are printed for tightening.
struct MixedTolerance {
  double logits, loss, gradient_l2;
};
MixedTolerance tolerance(HalfFormat f) {
  return f == HalfFormat::kBf16 ? MixedTolerance{3e-2, 3e-2, 5e-2}
                                : MixedTolerance{5e-3, 5e-3, 1e-2};
}

std::vector<float> uniform(size_t n, uint32_t seed, float lo, float hi) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

std::vector<int32_t> labels_for(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = static_cast<int32_t>(rng() % 10u);
  return v;
}

// max |got - want| / max(1, max |want|).
double max_relative(const std::vector<float>& got, const std::vector<float>& want) {
  double scale = 1.0, worst = 0.0;
  for (float w : want) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(d <= worst)) worst = d;  // NaN too
  }
  return worst / scale;
}

// ||got - want|| / ||want||.
double l2_relative(const float* got, const float* want, size_t n) {
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < n; ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    diff += d * d;
    norm += static_cast<double>(want[i]) * want[i];
  }
  return norm > 0 ? std::sqrt(diff / norm) : std::sqrt(diff);
}

class MixedModelTest : public testing::TestWithParam<HalfFormat> {};

TEST_P(MixedModelTest, OneStepMatchesTheCpuEmulationAndLeavesTheMasterWeights) {
  const HalfFormat format = GetParam();
  const model::Precision precision = precision_of(format);
  const MixedTolerance tol = tolerance(format);
  const model::ModelOptions options{.precision = precision};
  model::Model cpu(options);
  CudnnModel gpu(options, {.device = 0});
  ASSERT_EQ(gpu.precision(), precision);
  cpu.initialize(42);
  gpu.initialize(42);
  const float scale = 1024.0f;
  cpu.set_loss_scale(scale);
  gpu.set_loss_scale(scale);
  std::vector<float> master(gpu.num_parameters());
  gpu.copy_parameters_to_host(master);

  for (int batch : {16, 5}) {  // a second, odd batch reuses the buffers
    SCOPED_TRACE(std::string(model::precision_name(precision)) + " batch " + std::to_string(batch));
    const auto images = uniform(static_cast<size_t>(batch) * cpu.input_size(), batch, 0.0f, 1.0f);
    const auto labels = labels_for(static_cast<size_t>(batch), batch + 1);
    cpu.zero_gradients();
    gpu.zero_gradients();
    const model::LossResult want = cpu.forward(images, labels, batch);
    const model::LossResult got = gpu.forward(images, labels, batch);
    const auto cpu_logits = cpu.logits();
    const std::vector<float> want_logits(cpu_logits.begin(), cpu_logits.end());
    const std::vector<float> got_logits = gpu.logits_to_host();
    // The logits are 16-bit values on both sides.
    std::vector<float> rounded = got_logits;
    model::round_to_precision(precision, rounded);
    expect_same_bits(got_logits, rounded, "GPU logits as 16-bit values");
    const double logits_error = max_relative(got_logits, want_logits);
    const double loss_error = std::fabs(got.loss - want.loss) / std::max(1.0, want.loss);
    EXPECT_LE(logits_error, tol.logits);
    EXPECT_LE(loss_error, tol.loss) << "GPU loss " << got.loss << ", CPU " << want.loss;

    std::vector<size_t> order;
    cpu.backward();
    gpu.backward([&](size_t i) { order.push_back(i); });
    EXPECT_EQ(order, (std::vector<size_t>{7, 6, 5, 4, 3, 2, 1, 0}));
    std::vector<float> g(gpu.num_parameters());
    gpu.copy_gradients_to_host(g);
    std::vector<float> g16 = g;
    model::round_to_precision(precision, g16);
    expect_same_bits(g, g16, "GPU gradients as 16-bit values");
    std::printf("%s batch %d: loss %.6f (CPU %.6f), logits %.3g, gradients (L2):",
                model::precision_name(precision), batch, got.loss, want.loss, logits_error);
    for (size_t i = 0; i < gpu.parameters().size(); ++i) {
      const auto& p = gpu.parameters()[i];
      const double e = l2_relative(g.data() + p.offset, cpu.parameters()[i].gradient.data(),
                                   static_cast<size_t>(p.size));
      std::printf(" %s %.3g", p.name.c_str(), e);
      EXPECT_LE(e, tol.gradient_l2) << p.name << " gradient";
    }
    std::printf("\n");
    std::vector<float> after(gpu.num_parameters());
    gpu.copy_parameters_to_host(after);
    expect_same_bits(after, master, "fp32 master weights after forward and backward");
  }
}

TEST_P(MixedModelTest, AnOverflowSkipsTheStepAndHalvesTheScale) {
  const HalfFormat format = GetParam();
  const model::Precision precision = precision_of(format);
  CudnnModel gpu({.precision = precision}, {.device = 0});
  gpu.initialize(5);
  SgdMomentum opt(gpu.context(), gpu.num_parameters(), {.momentum = 0.9f, .weight_decay = 5e-4f});
  hvd::LossScaler scaler({.initial_scale = 16777216.0});  // 2^24, the maximum
  std::vector<float> before(gpu.num_parameters()), after(before.size());
  gpu.copy_parameters_to_host(before);

  const int batch = 16;
  const auto images = uniform(static_cast<size_t>(batch) * gpu.input_size(), 3, 0.0f, 1.0f);
  const auto labels = labels_for(batch, 4);
  gpu.zero_gradients();
  gpu.set_loss_scale(static_cast<float>(scaler.scale()));
  gpu.forward(images, labels, batch);
  gpu.backward();
  if (format == HalfFormat::kBf16) {
    // bf16 has float32's range: 2^24 x (a loss gradient of at most 1/16) does not overflow it, so
    // the overflow is injected into one gradient, as a layer's Inf would reach it.
    const float inf = std::numeric_limits<float>::infinity();
    const GpuParameterTensor& p = gpu.parameters()[2];
    ASSERT_EQ(
        cudaMemcpyAsync(p.gradient + 17, &inf, sizeof inf, cudaMemcpyHostToDevice, gpu.stream()),
        cudaSuccess);
  }
  // fp16: 2^24 / 16 = 2^20 > 65504, so the 16-bit loss gradient itself overflows.
  const bool overflow =
      unscale(gpu.flat_gradients(), gpu.num_parameters(), scaler.scale(), gpu.stream());
  EXPECT_TRUE(overflow);
  scaler.advance(overflow);  // update()'s schedule, without the all-reduce of a one-rank test
  if (!overflow) opt.step(gpu.flat_parameters(), gpu.flat_gradients(), 0.05f);
  EXPECT_EQ(scaler.scale(), 8388608.0);  // 2^23
  EXPECT_EQ(scaler.skipped_steps(), 1);
  gpu.copy_parameters_to_host(after);
  expect_same_bits(after, before, "weights after the skipped step");

  // The next step at a sane scale passes the check and the optimizer moves the weights.
  hvd::LossScaler sane({.initial_scale = 1024.0});
  gpu.zero_gradients();
  gpu.set_loss_scale(static_cast<float>(sane.scale()));
  gpu.forward(images, labels, batch);
  gpu.backward();
  EXPECT_FALSE(unscale(gpu.flat_gradients(), gpu.num_parameters(), sane.scale(), gpu.stream()));
  opt.step(gpu.flat_parameters(), gpu.flat_gradients(), 0.05f);
  gpu.copy_parameters_to_host(after);
  EXPECT_NE(after, before);
}

// A learnable set: ten fixed random prototypes, each image half its class's prototype and half
// uniform noise.
struct SyntheticSet {
  std::vector<float> images;
  std::vector<int32_t> labels;
};
SyntheticSet synthetic(int count, int64_t image_size, uint32_t seed) {
  const std::vector<float> prototypes = uniform(static_cast<size_t>(10 * image_size), 99, 0, 1);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> noise(0.0f, 1.0f);
  SyntheticSet s;
  s.labels = labels_for(static_cast<size_t>(count), seed + 1);
  s.images.resize(static_cast<size_t>(count * image_size));
  for (int n = 0; n < count; ++n)
    for (int64_t i = 0; i < image_size; ++i)
      s.images[n * image_size + i] =
          0.5f * prototypes[s.labels[n] * image_size + i] + 0.5f * noise(rng);
  return s;
}

TEST_P(MixedModelTest, ThreeHundredStepsWithDynamicLossScalingReduceTheLoss) {
  const HalfFormat format = GetParam();
  CudnnModel gpu({.precision = precision_of(format)}, {.device = 0});
  gpu.initialize(42);
  SgdMomentum opt(gpu.context(), gpu.num_parameters(), {.momentum = 0.9f, .weight_decay = 5e-4f});
  hvd::LossScaler scaler({.initial_scale = 65536.0, .growth_interval = 100});
  const int batch = 32, steps = 300;
  const SyntheticSet set = synthetic(batch * steps, gpu.input_size(), 7);
  std::vector<double> losses;
  for (int step = 0; step < steps; ++step) {
    const size_t first = static_cast<size_t>(step) * batch;
    gpu.zero_gradients();
    gpu.set_loss_scale(static_cast<float>(scaler.scale()));
    const double loss =
        gpu.forward(std::span<const float>(set.images)
                        .subspan(first * gpu.input_size(), batch * gpu.input_size()),
                    std::span<const int32_t>(set.labels).subspan(first, batch), batch)
            .loss;
    ASSERT_TRUE(std::isfinite(loss)) << "step " << step;
    losses.push_back(loss);
    gpu.backward();
    const bool overflow =
        unscale(gpu.flat_gradients(), gpu.num_parameters(), scaler.scale(), gpu.stream());
    scaler.advance(overflow);
    if (!overflow) opt.step(gpu.flat_parameters(), gpu.flat_gradients(), 0.01f);
  }
  auto mean = [&](int from, int to) {
    double s = 0;
    for (int i = from; i < to; ++i) s += losses[i];
    return s / (to - from);
  };
  const double start = mean(0, 5), end = mean(steps - 20, steps);
  std::printf(
      "%s: loss %.4f over the first 5 steps, %.4f over the last 20; %lld skipped, scale %g\n",
      model::precision_name(precision_of(format)), start, end,
      static_cast<long long>(scaler.skipped_steps()), scaler.scale());
  EXPECT_LT(end, 0.5 * start);
  EXPECT_LT(scaler.skipped_steps(), 30);  // overflows are rare events, not the rule
}

INSTANTIATE_TEST_SUITE_P(Formats, MixedModelTest,
                         testing::Values(HalfFormat::kFp16, HalfFormat::kBf16),
                         [](const testing::TestParamInfo<HalfFormat>& info) {
                           return info.param == HalfFormat::kFp16 ? "fp16" : "bf16";
                         });

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
