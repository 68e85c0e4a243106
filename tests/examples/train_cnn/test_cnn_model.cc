// The train_cnn model as a whole: parameter layout, initialisation, gradients of every parameter
// tensor against finite differences of the real loss, the on_grad_ready protocol, determinism,
// batch independence, and that a few SGD steps learn a synthetic task.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "data/synthetic.h"
#include "hvd/error.h"
#include "model/init.h"
#include "model/model.h"
#include "model/sgd_momentum.h"

namespace cm = train_cnn::model;
namespace td = train_cnn::data;

namespace {

// A small network of the same structure: 8x8 input, 3x3 kernels, few channels.
cm::ModelOptions small_options() {
  cm::ModelOptions o;
  o.height = 8;
  o.width = 8;
  o.conv1_channels = 3;
  o.conv2_channels = 4;
  o.kernel = 3;
  o.hidden = 6;
  o.num_classes = 5;
  return o;
}

std::vector<float> random_images(int64_t n, uint64_t seed) {
  cm::InitRng rng(seed);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = static_cast<float>(rng.uniform01());
  return v;
}

bool bitwise_equal(std::span<const float> a, std::span<const float> b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(CnnModel, DefaultLayoutNamesShapesAndOffsetsAreContiguous) {
  cm::Model m;
  const auto& p = m.parameters();
  ASSERT_EQ(p.size(), 8u);
  const std::vector<std::string> names = {"conv1.weight", "conv1.bias", "conv2.weight",
                                          "conv2.bias",   "fc1.weight", "fc1.bias",
                                          "fc2.weight",   "fc2.bias"};
  const std::vector<std::vector<int64_t>> shapes = {{32, 1, 5, 5}, {32},  {64, 32, 5, 5}, {64},
                                                    {512, 3136},   {512}, {10, 512},      {10}};
  int64_t offset = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    EXPECT_EQ(p[i].name, names[i]);
    EXPECT_EQ(p[i].shape, shapes[i]);
    int64_t n = 1;
    for (int64_t d : shapes[i]) n *= d;
    EXPECT_EQ(static_cast<int64_t>(p[i].value.size()), n);
    EXPECT_EQ(p[i].offset, offset);
    EXPECT_EQ(p[i].value.data(), m.flat_parameters().data() + offset);
    EXPECT_EQ(p[i].gradient.data(), m.flat_gradients().data() + offset);
    offset += n;
  }
  EXPECT_EQ(offset, m.num_parameters());
  EXPECT_EQ(m.num_parameters(), 800 + 32 + 51200 + 64 + 3136 * 512 + 512 + 5120 + 10);
  EXPECT_EQ(m.input_size(), 784);
}

TEST(CnnModel, InitialisationFollowsHeAndGlorotFromTheSeed) {
  cm::Model m;
  m.initialize(7);
  const auto& p = m.parameters();
  auto stats = [](std::span<const float> v) {
    double s = 0, s2 = 0;
    for (float x : v) {
      s += x;
      s2 += double{x} * x;
    }
    const double mean = s / v.size();
    return std::pair<double, double>(mean, std::sqrt(s2 / v.size() - mean * mean));
  };
  const auto [m2, sd2] = stats(p[2].value);  // conv2: fan_in 32*25
  EXPECT_NEAR(m2, 0.0, 0.002);
  EXPECT_NEAR(sd2, std::sqrt(2.0 / 800), 0.02 * std::sqrt(2.0 / 800));
  const auto [m4, sd4] = stats(p[4].value);  // fc1: fan_in 3136
  EXPECT_NEAR(sd4, std::sqrt(2.0 / 3136), 0.01 * std::sqrt(2.0 / 3136));
  EXPECT_NEAR(m4, 0.0, 1e-3);
  const double bound = std::sqrt(6.0 / (512 + 10));  // fc2: Glorot uniform
  float lo = 1, hi = -1;
  for (float x : p[6].value) {
    lo = std::min(lo, x);
    hi = std::max(hi, x);
  }
  EXPECT_GE(lo, -bound);
  EXPECT_LE(hi, bound);
  EXPECT_LT(lo, -0.9 * bound);
  EXPECT_GT(hi, 0.9 * bound);
  for (int i : {1, 3, 5, 7}) {
    for (float x : p[i].value) EXPECT_EQ(x, 0.0f) << p[i].name;
  }
  cm::Model same, other;
  same.initialize(7);
  other.initialize(8);
  EXPECT_TRUE(bitwise_equal(m.flat_parameters(), same.flat_parameters()));
  EXPECT_FALSE(bitwise_equal(m.flat_parameters(), other.flat_parameters()));
}

TEST(CnnModel, EveryParameterGradientMatchesFiniteDifferencesOfTheLoss) {
  cm::Model m(small_options());
  m.initialize(3);
  // Non-zero biases so that every path is exercised.
  cm::InitRng rng(99);
  for (int i : {1, 3, 5, 7}) {
    for (float& b : m.parameters()[i].value) b = static_cast<float>(0.1 * rng.normal());
  }
  const int batch = 3;
  const std::vector<float> images = random_images(batch * m.input_size(), 4);
  const std::vector<int32_t> labels = {1, 4, 0};
  m.zero_gradients();
  m.forward(images, labels, batch);
  m.backward();
  const std::vector<float> grads(m.flat_gradients().begin(), m.flat_gradients().end());

  auto loss = [&] { return m.forward(images, labels, batch).loss; };
  for (const cm::ParameterTensor& t : m.parameters()) {
    // Up to 12 elements per tensor, spread over it.
    const int64_t n = static_cast<int64_t>(t.value.size());
    const int64_t stride = std::max<int64_t>(1, n / 12);
    for (int64_t i = 0; i < n; i += stride) {
      const double analytic = grads[t.offset + i];
      bool ok = false;
      double fd = 0.0;
      for (float h : {1e-2f, 2.5e-3f}) {  // double-check: a ReLU/max-pool kink crossed at one
        const float saved = t.value[i];   // step is unlikely to be crossed at both
        t.value[i] = saved + h;
        const double up = loss();
        t.value[i] = saved - h;
        const double down = loss();
        t.value[i] = saved;
        fd = (up - down) / (2.0 * h);
        if (std::abs(fd - analytic) <= 2e-4 + 2e-2 * std::max(std::abs(fd), std::abs(analytic))) {
          ok = true;
          break;
        }
      }
      EXPECT_TRUE(ok) << t.name << "[" << i << "]: analytic " << analytic
                      << " vs finite difference " << fd;
    }
  }
}

TEST(CnnModel, OnGradReadyFiresOncePerTensorLastLayerFirstWithFinalGradients) {
  cm::Model m(small_options());
  m.initialize(5);
  const int batch = 2;
  const std::vector<float> images = random_images(batch * m.input_size(), 6);
  const std::vector<int32_t> labels = {2, 3};
  m.zero_gradients();
  m.forward(images, labels, batch);
  std::vector<size_t> order;
  std::vector<std::vector<float>> snapshot(m.parameters().size());
  m.backward([&](size_t i) {
    order.push_back(i);
    const auto& g = m.parameters()[i].gradient;
    snapshot[i].assign(g.begin(), g.end());
  });
  EXPECT_EQ(order, (std::vector<size_t>{7, 6, 5, 4, 3, 2, 1, 0}));
  for (size_t i = 0; i < snapshot.size(); ++i) {
    EXPECT_TRUE(bitwise_equal(snapshot[i], m.parameters()[i].gradient))
        << m.parameters()[i].name << " changed after on_grad_ready";
  }
}

TEST(CnnModel, SameInputGivesBitwiseSameLossAndGradients) {
  const cm::ModelOptions o;  // the real model
  cm::Model a(o), b(o);
  a.initialize(11);
  b.initialize(11);
  const int batch = 5;
  const std::vector<float> images = random_images(batch * a.input_size(), 12);
  const std::vector<int32_t> labels = {0, 1, 2, 3, 9};
  a.zero_gradients();
  const double la = a.forward(images, labels, batch).loss;
  a.backward();
  b.zero_gradients();
  b.forward(std::span<const float>(images).first(2 * b.input_size()),
            std::span<const int32_t>(labels).first(2), 2);  // another batch first must not matter
  b.zero_gradients();
  const double lb = b.forward(images, labels, batch).loss;
  b.backward();
  EXPECT_EQ(std::memcmp(&la, &lb, sizeof(double)), 0) << la << " vs " << lb;
  EXPECT_TRUE(bitwise_equal(a.flat_gradients(), b.flat_gradients()));
  EXPECT_TRUE(bitwise_equal(a.logits(), b.logits()));
}

TEST(CnnModel, SampleLogitsDoNotDependOnTheRestOfTheBatch) {
  cm::Model m(small_options());
  m.initialize(13);
  const int batch = 5;
  const std::vector<float> images = random_images(batch * m.input_size(), 14);
  const std::vector<int32_t> labels = {0, 1, 2, 3, 4};
  m.forward(images, labels, batch);
  const std::vector<float> together(m.logits().begin(), m.logits().end());
  for (int n = 0; n < batch; ++n) {
    m.forward(std::span<const float>(images).subspan(n * m.input_size(), m.input_size()),
              std::span<const int32_t>(labels).subspan(n, 1), 1);
    for (int c = 0; c < m.num_classes(); ++c) {
      EXPECT_NEAR(m.logits()[c], together[n * m.num_classes() + c], 1e-5);
    }
  }
}

TEST(CnnModel, BackwardAccumulatesUntilZeroGradients) {
  cm::Model m(small_options());
  m.initialize(15);
  const std::vector<float> images = random_images(2 * m.input_size(), 16);
  const std::vector<int32_t> labels = {1, 2};
  m.zero_gradients();
  m.forward(images, labels, 2);
  m.backward();
  const std::vector<float> once(m.flat_gradients().begin(), m.flat_gradients().end());
  m.forward(images, labels, 2);
  m.backward();
  for (size_t i = 0; i < once.size(); ++i) {
    EXPECT_NEAR(m.flat_gradients()[i], 2 * once[i], 1e-5 + 1e-5 * std::abs(once[i]));
  }
  m.zero_gradients();
  for (float g : m.flat_gradients()) EXPECT_EQ(g, 0.0f);
}

TEST(CnnModel, EmptyBatchAndBadArgumentsAreHandled) {
  cm::Model m(small_options());
  m.initialize(1);
  EXPECT_THROW(m.backward(), hvd::InvalidArgumentError);  // before any forward
  m.zero_gradients();
  const cm::LossResult r = m.forward({}, {}, 0);
  EXPECT_EQ(r.loss, 0.0);
  m.backward();
  for (float g : m.flat_gradients()) EXPECT_EQ(g, 0.0f);
  std::vector<float> wrong(m.input_size() - 1);
  EXPECT_THROW(m.forward(wrong, std::vector<int32_t>{0}, 1), hvd::InvalidArgumentError);
  std::vector<float> one(m.input_size());
  EXPECT_THROW(m.forward(one, std::vector<int32_t>{5}, 1), hvd::InvalidArgumentError);
  cm::ModelOptions tiny = small_options();
  tiny.height = 3;
  EXPECT_THROW(cm::Model{tiny}, hvd::InvalidArgumentError);
}

TEST(CnnModel, SgdMomentumLearnsASyntheticTask) {
  cm::ModelOptions o = small_options();
  o.height = o.width = 12;
  o.num_classes = 4;
  o.hidden = 32;
  o.conv1_channels = 8;
  o.conv2_channels = 8;
  // The shapes without per-sample jitter: told apart by shape and shading alone, in few steps.
  td::SyntheticOptions so{.rows = 12, .cols = 12, .num_classes = 4, .noise = 0.3f, .jitter = 0.0f};
  const td::Dataset train = td::make_synthetic(256, 1, so);
  const td::Dataset test = td::make_synthetic(128, 2, so);
  cm::Model m(o);
  m.initialize(17);
  cm::SgdMomentum opt(m.num_parameters(), {.momentum = 0.9f});
  const double before = m.evaluate(test.images, test.labels, test.count).loss;
  const int batch = 16;
  for (int epoch = 0; epoch < 3; ++epoch) {
    for (int64_t s = 0; s + batch <= train.count; s += batch) {
      m.zero_gradients();
      m.forward(
          std::span<const float>(train.images).subspan(s * m.input_size(), batch * m.input_size()),
          std::span<const int32_t>(train.labels).subspan(s, batch), batch);
      m.backward();
      opt.step(m.flat_parameters(), m.flat_gradients(), 0.05f);
    }
  }
  const cm::Model::Evaluation after = m.evaluate(test.images, test.labels, test.count, 50);
  EXPECT_EQ(after.count, 128);
  EXPECT_LT(after.loss, 0.5 * before);
  EXPECT_GT(after.accuracy, 0.9);
}

}  // namespace
