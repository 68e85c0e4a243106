// The cuDNN/cuBLAS layers and model of examples/train_cnn/gpu against the CPU layers and model of
// examples/train_cnn/model on the same inputs and parameters: forward outputs and every gradient
// agree to FP32 tolerance, the GPU SGD step equals the CPU one bit for bit, and a few training
// steps of both models stay together. The CPU side is the reference (its own tests check it
// against finite differences). Exits 77 (ctest: skipped) with a message when no CUDA device is
// visible; runs on device 0.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "gpu/conv2d.h"
#include "gpu/cudnn_model.h"
#include "gpu/dense.h"
#include "gpu/maxpool2d.h"
#include "gpu/relu.h"
#include "gpu/sgd_momentum.h"
#include "gpu/softmax_cross_entropy.h"
#include "hvd/error.h"
#include "model/conv2d.h"
#include "model/dense.h"
#include "model/maxpool2d.h"
#include "model/model.h"
#include "model/relu.h"
#include "model/sgd_momentum.h"
#include "model/softmax_cross_entropy.h"

namespace train_cnn::gpu {
namespace {

// FP32 on both sides, different summation orders: relative to the largest reference magnitude.
constexpr double kTol = 2e-4;

std::vector<float> random_vector(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(lo, hi);
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return v;
}

std::vector<int32_t> random_labels(size_t n, int classes, uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<int32_t> v(n);
  for (int32_t& x : v) x = static_cast<int32_t>(rng() % static_cast<uint32_t>(classes));
  return v;
}

// A device copy of a host vector, and back.
template <class T>
DeviceArray<T> upload(const std::vector<T>& host) {
  DeviceArray<T> d(std::max<size_t>(host.size(), 1));
  if (!host.empty()) {
    EXPECT_EQ(cudaMemcpy(d.data(), host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice),
              cudaSuccess);
  }
  return d;
}
template <class T>
std::vector<T> download(const DeviceArray<T>& d, size_t n, CudaContext& ctx) {
  ctx.synchronize();
  std::vector<T> host(n);
  if (n > 0) {
    EXPECT_EQ(cudaMemcpy(host.data(), d.data(), n * sizeof(T), cudaMemcpyDeviceToHost),
              cudaSuccess);
  }
  return host;
}

// max |got - want| <= tol * max(1, max |want|), with the worst index in the message.
void expect_close(const std::vector<float>& got, const std::vector<float>& want, double tol,
                  const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double scale = 1.0, worst = 0.0;
  size_t at = 0;
  for (float w : want) scale = std::max(scale, static_cast<double>(std::fabs(w)));
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = std::fabs(static_cast<double>(got[i]) - want[i]);
    if (!(d <= worst)) {  // also catches NaN
      worst = d;
      at = i;
    }
  }
  EXPECT_LE(worst, tol * scale) << what << ": worst difference at " << at << ": GPU " << got[at]
                                << ", CPU " << want[at] << " (scale " << scale << ")";
}

// ||got - want|| <= tol * ||want|| (L2). For gradients of the whole network: a pre-activation
// within rounding distance of zero (or a near-tie in a max-pool window) can take the other branch
// on one side, which moves one unit's contribution: a small change of the norm (about 1e-3 at
// worst) but a large one of the maximum element. Wiring mistakes change the norm by O(1).
void expect_close_l2(const std::vector<float>& got, const std::vector<float>& want, double tol,
                     const std::string& what) {
  ASSERT_EQ(got.size(), want.size()) << what;
  double diff = 0.0, norm = 0.0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double d = static_cast<double>(got[i]) - want[i];
    diff += d * d;
    norm += static_cast<double>(want[i]) * want[i];
  }
  EXPECT_LE(std::sqrt(diff), tol * std::sqrt(norm))
      << what << ": |GPU - CPU| = " << std::sqrt(diff) << ", |CPU| = " << std::sqrt(norm);
}

struct ConvCase {
  model::Conv2dOptions options;
  int batch;
};

class ConvAgainstCpu : public testing::TestWithParam<ConvAlgorithms> {};

TEST_P(ConvAgainstCpu, ForwardAndAllGradientsMatchTheCpuLayerAndGradientsAccumulate) {
  const std::vector<ConvCase> cases = {
      {{.in_channels = 1, .out_channels = 32, .kernel = 5, .height = 28, .width = 28}, 3},
      {{.in_channels = 32, .out_channels = 64, .kernel = 5, .height = 14, .width = 14}, 2},
      {{.in_channels = 3, .out_channels = 5, .kernel = 3, .height = 7, .width = 9}, 1},
      {{.in_channels = 2, .out_channels = 3, .kernel = 3, .height = 6, .width = 5, .padding = 0},
       4},
  };
  CudaContext ctx({.device = 0, .conv_algorithms = GetParam()});
  uint32_t seed = 1;
  for (const ConvCase& c : cases) {
    SCOPED_TRACE("conv " + std::to_string(c.options.in_channels) + "->" +
                 std::to_string(c.options.out_channels) + " k" + std::to_string(c.options.kernel) +
                 " " + std::to_string(c.options.height) + "x" + std::to_string(c.options.width) +
                 " batch " + std::to_string(c.batch));
    model::Conv2d cpu(c.options);
    CudnnConv2d gpu(ctx, c.options);
    ASSERT_EQ(gpu.output_size(), cpu.output_size());
    auto w = random_vector(cpu.weight_size(), seed++);
    auto b = random_vector(cpu.bias_size(), seed++);
    // Non-zero starting gradients: backward must ADD to them.
    auto gw = random_vector(cpu.weight_size(), seed++);
    auto gb = random_vector(cpu.bias_size(), seed++);
    auto x = random_vector(c.batch * cpu.input_size(), seed++);
    auto dy = random_vector(c.batch * cpu.output_size(), seed++);
    auto d_w = upload(w), d_b = upload(b), d_gw = upload(gw), d_gb = upload(gb), d_x = upload(x),
         d_dy = upload(dy);
    DeviceArray<float> d_y(c.batch * cpu.output_size()), d_dx(c.batch * cpu.input_size());

    cpu.bind(w, b, gw, gb);
    gpu.bind(d_w.data(), d_b.data(), d_gw.data(), d_gb.data());
    std::vector<float> y(c.batch * cpu.output_size()), dx(c.batch * cpu.input_size());
    cpu.forward(x, y, c.batch);
    gpu.forward(d_x.data(), d_y.data(), c.batch);
    expect_close(download(d_y, y.size(), ctx), y, kTol, "y");

    cpu.backward(x, dy, dx, c.batch);
    gpu.backward(d_x.data(), d_dy.data(), d_dx.data(), c.batch);
    expect_close(download(d_dx, dx.size(), ctx), dx, kTol, "dx");
    expect_close(download(d_gw, gw.size(), ctx), gw, kTol, "weight gradient");
    expect_close(download(d_gb, gb.size(), ctx), gb, kTol, "bias gradient");

    const CudnnConv2d::Plan& plan = gpu.plan(c.batch);
    if (GetParam() == ConvAlgorithms::kFixed) {
      EXPECT_EQ(plan.forward, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM);
      EXPECT_EQ(plan.backward_data, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1);
      EXPECT_EQ(plan.backward_filter, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1);
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, ConvAgainstCpu,
                         testing::Values(ConvAlgorithms::kHeuristic, ConvAlgorithms::kFixed));

TEST(CudnnMaxPool2d, ForwardAndBackwardMatchTheCpuLayerIncludingDroppedEdges) {
  CudaContext ctx({.device = 0});
  const std::vector<std::pair<model::MaxPool2dOptions, int>> cases = {
      {{.channels = 32, .height = 28, .width = 28, .kernel = 2}, 3},
      {{.channels = 3, .height = 7, .width = 8, .kernel = 3}, 2},  // trailing rows/cols dropped
      {{.channels = 1, .height = 2, .width = 2, .kernel = 2}, 1},
  };
  uint32_t seed = 100;
  for (const auto& [o, batch] : cases) {
    SCOPED_TRACE("pool k" + std::to_string(o.kernel) + " " + std::to_string(o.height) + "x" +
                 std::to_string(o.width));
    model::MaxPool2d cpu(o);
    CudnnMaxPool2d gpu(ctx, o);
    // Distinct values (no ties), so both pick the same winner.
    auto x = random_vector(batch * cpu.input_size(), seed++);
    auto dy = random_vector(batch * cpu.output_size(), seed++);
    auto d_x = upload(x), d_dy = upload(dy);
    DeviceArray<float> d_y(dy.size()), d_dx(x.size());
    std::vector<float> y(dy.size()), dx(x.size());
    cpu.forward(x, y, batch);
    gpu.forward(d_x.data(), d_y.data(), batch);
    EXPECT_EQ(download(d_y, y.size(), ctx), y);  // a max is exact
    cpu.backward(dy, dx, batch);
    gpu.backward(d_x.data(), d_y.data(), d_dy.data(), d_dx.data(), batch);
    EXPECT_EQ(download(d_dx, dx.size(), ctx), dx);
  }
}

TEST(CudnnRelu, ForwardAndBackwardMatchTheCpuInPlaceWithExactZeros) {
  CudaContext ctx({.device = 0});
  const int batch = 3, c = 4, h = 5, w = 7;
  auto x = random_vector(static_cast<size_t>(batch) * c * h * w, 7);
  for (size_t i = 0; i < x.size(); i += 11) x[i] = 0.0f;  // gradient at exactly 0 is 0
  auto dy = random_vector(x.size(), 8);
  std::vector<float> y(x.size()), dx(x.size());
  model::relu_forward(x, y);
  model::relu_backward(y, dy, dx);

  CudnnRelu relu(ctx, c, h, w);
  auto d_a = upload(x), d_g = upload(dy);
  relu.forward(d_a.data(), d_a.data(), batch);  // in place
  EXPECT_EQ(download(d_a, y.size(), ctx), y);
  relu.backward(d_a.data(), d_g.data(), d_g.data(), batch);  // in place
  EXPECT_EQ(download(d_g, dx.size(), ctx), dx);
}

TEST(CublasDense, ForwardAndAllGradientsMatchTheCpuLayerForOddShapesAndBatchOne) {
  CudaContext ctx({.device = 0});
  for (const auto& [in, out, batch] :
       std::vector<std::tuple<int, int, int>>{{37, 11, 5}, {3136, 512, 4}, {512, 10, 1}}) {
    SCOPED_TRACE("dense " + std::to_string(in) + "->" + std::to_string(out) + " batch " +
                 std::to_string(batch));
    model::Dense cpu({.in_features = in, .out_features = out});
    CublasDense gpu(ctx, {.in_features = in, .out_features = out});
    auto w = random_vector(cpu.weight_size(), in + 1), b = random_vector(out, in + 2);
    auto gw = random_vector(cpu.weight_size(), in + 3), gb = random_vector(out, in + 4);
    auto x = random_vector(static_cast<size_t>(batch) * in, in + 5);
    auto dy = random_vector(static_cast<size_t>(batch) * out, in + 6);
    auto d_w = upload(w), d_b = upload(b), d_gw = upload(gw), d_gb = upload(gb), d_x = upload(x),
         d_dy = upload(dy);
    DeviceArray<float> d_y(dy.size()), d_dx(x.size());
    cpu.bind(w, b, gw, gb);
    gpu.bind(d_w.data(), d_b.data(), d_gw.data(), d_gb.data());
    std::vector<float> y(dy.size()), dx(x.size());
    cpu.forward(x, y, batch);
    gpu.forward(d_x.data(), d_y.data(), batch);
    expect_close(download(d_y, y.size(), ctx), y, kTol, "y");
    cpu.backward(x, dy, dx, batch);
    gpu.backward(d_x.data(), d_dy.data(), d_dx.data(), batch);
    expect_close(download(d_dx, dx.size(), ctx), dx, kTol, "dx");
    expect_close(download(d_gw, gw.size(), ctx), gw, kTol, "weight gradient");
    expect_close(download(d_gb, gb.size(), ctx), gb, kTol, "bias gradient");
  }
}

TEST(CudnnSoftmaxCrossEntropy, LossCorrectCountAndGradientMatchTheCpuWithLargeLogits) {
  CudaContext ctx({.device = 0});
  const int classes = 10;
  for (int batch : {1, 7, 300}) {
    SCOPED_TRACE("batch " + std::to_string(batch));
    auto z = random_vector(static_cast<size_t>(batch) * classes, batch, -80.0f, 80.0f);
    auto labels = random_labels(batch, classes, batch + 1);
    labels[0] = static_cast<int32_t>(std::max_element(z.begin(), z.begin() + classes) - z.begin());
    model::SoftmaxCrossEntropy cpu(classes);
    const model::LossResult want = cpu.forward(z, labels, batch);
    std::vector<float> dz(z.size());
    cpu.backward(dz);

    CudnnSoftmaxCrossEntropy gpu(ctx, classes);
    auto d_z = upload(z);
    auto d_labels = upload(labels);
    DeviceArray<float> d_dz(z.size());
    gpu.forward(d_z.data(), d_labels.data(), batch);
    const model::LossResult got = gpu.result();
    EXPECT_NEAR(got.loss, want.loss, 1e-4 * std::max(1.0, want.loss));
    EXPECT_EQ(got.correct, want.correct);
    EXPECT_GE(got.correct, 1);
    gpu.backward(d_dz.data());
    expect_close(download(d_dz, dz.size(), ctx), dz, 1e-5, "dlogits");
  }
}

TEST(CudnnSoftmaxCrossEntropy, EmptyBatchIsZeroAndAnInvalidDeviceLabelIsReported) {
  CudaContext ctx({.device = 0});
  CudnnSoftmaxCrossEntropy loss(ctx, 10);
  loss.forward(nullptr, nullptr, 0);
  const model::LossResult r = loss.result();
  EXPECT_EQ(r.loss, 0.0);
  EXPECT_EQ(r.correct, 0);

  auto z = random_vector(30, 3);
  auto d_z = upload(z);
  auto d_labels = upload(std::vector<int32_t>{4, 10, -1});
  loss.forward(d_z.data(), d_labels.data(), 3);
  try {
    loss.result();
    FAIL() << "label 10 accepted";
  } catch (const hvd::InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("sample 1 has label 10"), std::string::npos) << e.what();
  }
}

TEST(GpuSgdMomentum, StepsEqualTheCpuOptimizerBitForBit) {
  CudaContext ctx({.device = 0});
  for (const bool nesterov : {false, true}) {
    const model::SgdMomentumOptions o{
        .momentum = 0.9f, .weight_decay = 5e-4f, .nesterov = nesterov};
    const int64_t n = 1001;
    auto params = random_vector(n, 11);
    model::SgdMomentum cpu(n, o);
    SgdMomentum gpu(ctx, n, o);
    auto d_params = upload(params);
    for (int step = 0; step < 3; ++step) {
      auto grads = random_vector(n, 20 + step);
      auto d_grads = upload(grads);
      cpu.step(params, grads, 0.05f / (step + 1));
      gpu.step(d_params.data(), d_grads.data(), 0.05f / (step + 1));
      ctx.synchronize();
    }
    EXPECT_EQ(download(d_params, n, ctx), params) << "nesterov " << nesterov;
    std::vector<float> v(n);
    gpu.velocity_to_host(v);
    EXPECT_EQ(v, std::vector<float>(cpu.velocity().begin(), cpu.velocity().end()));
    gpu.reset();
    gpu.velocity_to_host(v);
    EXPECT_EQ(v, std::vector<float>(n, 0.0f));
    EXPECT_THROW(gpu.velocity_from_host(std::vector<float>(n - 1)), hvd::InvalidArgumentError);
  }
  EXPECT_THROW(SgdMomentum(ctx, 4, {.momentum = 1.5f}), hvd::InvalidArgumentError);
}

// A model pair with the same parameters, and a batch of images in [0, 1].
struct ModelPair {
  model::Model cpu;
  CudnnModel gpu;
  explicit ModelPair(uint64_t seed, const GpuOptions& g = {.device = 0}) : gpu({}, g) {
    cpu.initialize(seed);
    gpu.initialize(seed);
  }
};

std::vector<float> cpu_gradient(const model::Model& m, size_t i) {
  const auto& g = m.parameters()[i].gradient;
  return {g.begin(), g.end()};
}

TEST(CudnnModel, InitialisesExactlyAsTheCpuModelWithTheSameLayout) {
  ModelPair m(42);
  ASSERT_EQ(m.gpu.num_parameters(), m.cpu.num_parameters());
  ASSERT_EQ(m.gpu.num_parameters(), 1663370);
  ASSERT_EQ(m.gpu.parameters().size(), m.cpu.parameters().size());
  for (size_t i = 0; i < m.cpu.parameters().size(); ++i) {
    EXPECT_EQ(m.gpu.parameters()[i].name, m.cpu.parameters()[i].name);
    EXPECT_EQ(m.gpu.parameters()[i].shape, m.cpu.parameters()[i].shape);
    EXPECT_EQ(m.gpu.parameters()[i].offset, m.cpu.parameters()[i].offset);
  }
  std::vector<float> p(m.gpu.num_parameters());
  m.gpu.copy_parameters_to_host(p);
  EXPECT_EQ(p, std::vector<float>(m.cpu.flat_parameters().begin(), m.cpu.flat_parameters().end()));
}

TEST(CudnnModel, ForwardLogitsLossAndEveryGradientMatchTheCpuModelInCallbackOrder7To0) {
  ModelPair m(7);
  for (int batch : {16, 5, 1}) {  // shrinking and odd batches reuse the buffers
    SCOPED_TRACE("batch " + std::to_string(batch));
    auto images = random_vector(batch * m.cpu.input_size(), batch, 0.0f, 1.0f);
    auto labels = random_labels(batch, 10, batch + 1);
    m.cpu.zero_gradients();
    m.gpu.zero_gradients();
    const model::LossResult want = m.cpu.forward(images, labels, batch);
    const model::LossResult got = m.gpu.forward(images, labels, batch);
    EXPECT_NEAR(got.loss, want.loss, 1e-4 * std::max(1.0, want.loss));
    EXPECT_NEAR(static_cast<double>(got.correct), static_cast<double>(want.correct), 1.0);
    const auto cpu_logits = m.cpu.logits();
    expect_close(m.gpu.logits_to_host(), {cpu_logits.begin(), cpu_logits.end()}, kTol, "logits");

    std::vector<size_t> order;
    m.cpu.backward();
    m.gpu.backward([&](size_t i) {
      order.push_back(i);
      EXPECT_NE(m.gpu.parameters()[i].gradient, nullptr);
    });
    EXPECT_EQ(order, (std::vector<size_t>{7, 6, 5, 4, 3, 2, 1, 0}));
    std::vector<float> g(m.gpu.num_parameters());
    m.gpu.copy_gradients_to_host(g);
    for (size_t i = 0; i < m.gpu.parameters().size(); ++i) {
      const auto& p = m.gpu.parameters()[i];
      expect_close_l2({g.begin() + p.offset, g.begin() + p.offset + p.size}, cpu_gradient(m.cpu, i),
                      5e-3, p.name + " gradient");
    }
  }
}

TEST(CudnnModel, SameInputsGiveBitwiseSameGradientsAndBackwardAccumulates) {
  ModelPair m(3);
  const int batch = 12;
  auto images = random_vector(batch * m.cpu.input_size(), 5, 0.0f, 1.0f);
  auto labels = random_labels(batch, 10, 6);
  std::vector<float> once(m.gpu.num_parameters()), again(once.size()), twice(once.size());
  m.gpu.zero_gradients();
  m.gpu.forward(images, labels, batch);
  m.gpu.backward();
  m.gpu.copy_gradients_to_host(once);
  m.gpu.zero_gradients();
  m.gpu.forward(images, labels, batch);
  m.gpu.backward();
  m.gpu.copy_gradients_to_host(again);
  EXPECT_EQ(once, again);
  m.gpu.forward(images, labels, batch);  // no zeroing: the second backward adds
  m.gpu.backward();
  m.gpu.copy_gradients_to_host(twice);
  std::vector<float> doubled(once.size());
  for (size_t i = 0; i < once.size(); ++i) doubled[i] = 2.0f * once[i];
  expect_close(twice, doubled, 1e-5, "gradients after two backward passes");
}

TEST(CudnnModel, FiveSgdStepsStayWithTheCpuModelAndEvaluateAgrees) {
  ModelPair m(42);
  const model::SgdMomentumOptions o{.momentum = 0.9f, .weight_decay = 5e-4f};
  model::SgdMomentum cpu_opt(m.cpu.num_parameters(), o);
  SgdMomentum gpu_opt(m.gpu.context(), m.gpu.num_parameters(), o);
  const int batch = 32;
  for (int step = 0; step < 5; ++step) {
    auto images = random_vector(batch * m.cpu.input_size(), 100 + step, 0.0f, 1.0f);
    auto labels = random_labels(batch, 10, 200 + step);
    m.cpu.zero_gradients();
    m.gpu.zero_gradients();
    const double want = m.cpu.forward(images, labels, batch).loss;
    m.gpu.enqueue_forward(images, labels, batch);
    m.cpu.backward();
    m.gpu.backward();
    cpu_opt.step(m.cpu.flat_parameters(), m.cpu.flat_gradients(), 0.05f);
    gpu_opt.step(m.gpu.flat_parameters(), m.gpu.flat_gradients(), 0.05f);
    EXPECT_NEAR(m.gpu.last_loss().loss, want, 1e-3 * std::max(1.0, want)) << "step " << step;
  }
  std::vector<float> p(m.gpu.num_parameters()), v(p.size());
  m.gpu.copy_parameters_to_host(p);
  expect_close(p, {m.cpu.flat_parameters().begin(), m.cpu.flat_parameters().end()}, 1e-3,
               "parameters after 5 steps");
  gpu_opt.velocity_to_host(v);
  expect_close_l2(v, {cpu_opt.velocity().begin(), cpu_opt.velocity().end()}, 5e-3,
                  "velocity after 5 steps");

  const int64_t count = 300;  // two chunks of 256 and 44
  auto images = random_vector(count * m.cpu.input_size(), 9, 0.0f, 1.0f);
  auto labels = random_labels(count, 10, 10);
  const auto want = m.cpu.evaluate(images, labels, count);
  const auto got = m.gpu.evaluate(images, labels, count);
  EXPECT_EQ(got.count, count);
  EXPECT_NEAR(got.loss, want.loss, 1e-3 * std::max(1.0, want.loss));
  EXPECT_NEAR(got.accuracy, want.accuracy, 2.0 / count);
}

TEST(CudnnModel, Tf32MathStaysCloseToTheCpuModel) {
  ModelPair m(11, {.device = 0, .allow_tf32 = true});
  const int batch = 8;
  auto images = random_vector(batch * m.cpu.input_size(), 12, 0.0f, 1.0f);
  auto labels = random_labels(batch, 10, 13);
  const double want = m.cpu.forward(images, labels, batch).loss;
  EXPECT_NEAR(m.gpu.forward(images, labels, batch).loss, want, 2e-2 * std::max(1.0, want));
}

TEST(CudnnModel, EmptyBatchAndDeviceInputAndBadArgumentsBehaveAsOnTheCpu) {
  ModelPair m(1);
  // Batch 0: loss 0, no gradient, every callback still fires once.
  m.gpu.zero_gradients();
  const model::LossResult r = m.gpu.forward({}, {}, 0);
  EXPECT_EQ(r.loss, 0.0);
  EXPECT_EQ(r.correct, 0);
  int calls = 0;
  m.gpu.backward([&](size_t) { ++calls; });
  EXPECT_EQ(calls, 8);
  std::vector<float> g(m.gpu.num_parameters());
  m.gpu.copy_gradients_to_host(g);
  EXPECT_TRUE(std::all_of(g.begin(), g.end(), [](float x) { return x == 0.0f; }));

  // Device-resident input gives the host path's result.
  const int batch = 4;
  auto images = random_vector(batch * m.cpu.input_size(), 21, 0.0f, 1.0f);
  auto labels = random_labels(batch, 10, 22);
  const double host_loss = m.gpu.forward(images, labels, batch).loss;
  auto d_images = upload(images);
  auto d_labels = upload(labels);
  m.gpu.enqueue_forward_device(d_images.data(), d_labels.data(), batch);
  EXPECT_EQ(m.gpu.last_loss().loss, host_loss);

  EXPECT_THROW(m.gpu.forward(images, labels, batch + 1), hvd::InvalidArgumentError);
  auto bad = labels;
  bad[2] = 10;
  EXPECT_THROW(m.gpu.forward(images, bad, batch), hvd::InvalidArgumentError);
  EXPECT_THROW(CudnnModel({}, {.device = 1 << 20}), hvd::InvalidArgumentError);
  EXPECT_THROW(CudnnModel({.height = 2}), hvd::InvalidArgumentError);
}

}  // namespace
}  // namespace train_cnn::gpu

int main(int argc, char** argv) {
  const int devices = train_cnn::gpu::device_count();
  if (devices == 0) {
    std::printf(
        "SKIPPED: no CUDA device visible; test_cnn_cudnn compares the cuDNN model with the "
        "CPU model on a GPU.\n");
    std::fflush(stdout);
    return 77;
  }
  testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
