// Each CPU layer of examples/train_cnn against an independent reference: forward against a naive
// loop written here, backward (input and parameter gradients) against central finite differences
// of the scalar L = sum(y * R) for a fixed random R, so dL/dy = R.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <random>
#include <vector>

#include "hvd/error.h"
#include "model/conv2d.h"
#include "model/dense.h"
#include "model/maxpool2d.h"
#include "model/relu.h"
#include "model/sgd_momentum.h"
#include "model/softmax_cross_entropy.h"

namespace cm = train_cnn::model;

namespace {

std::vector<float> random_vector(size_t n, uint32_t seed, float lo = -1.0f, float hi = 1.0f) {
  std::mt19937 rng(seed);
  std::vector<float> v(n);
  for (float& x : v) x = lo + (hi - lo) * static_cast<float>(rng() >> 8) / 16777216.0f;
  return v;
}

double dot(const std::vector<float>& a, const std::vector<float>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += static_cast<double>(a[i]) * b[i];
  return s;
}

// Central difference of loss() with respect to every element of v, compared to analytic. The
// check is "double-checking": an element passes if the difference at step h or at h/4 agrees
// (a kink crossed at one step size is unlikely to be crossed at both).
void expect_gradient_matches(std::vector<float>& v, const std::vector<float>& analytic,
                             const std::function<double()>& loss, const char* what, float h = 1e-2f,
                             double rtol = 1e-2, double atol = 2e-3) {
  ASSERT_EQ(v.size(), analytic.size()) << what;
  for (size_t i = 0; i < v.size(); ++i) {
    bool ok = false;
    double fd = 0.0;
    for (float step : {h, h / 4}) {
      const float saved = v[i];
      v[i] = saved + step;
      const double up = loss();
      v[i] = saved - step;
      const double down = loss();
      v[i] = saved;
      fd = (up - down) / (2.0 * step);
      if (std::abs(fd - analytic[i]) <=
          atol + rtol * std::max(std::abs(fd), std::abs(double{analytic[i]}))) {
        ok = true;
        break;
      }
    }
    EXPECT_TRUE(ok) << what << "[" << i << "]: analytic " << analytic[i] << " vs finite difference "
                    << fd;
  }
}

struct ConvCase {
  int c, oc, k, h, w, pad, batch;
};

// y[n,o,i,j] = b[o] + sum_{c,ki,kj} W[o,c,ki,kj] * x[n,c,i+ki-p,j+kj-p] (zero outside).
std::vector<double> naive_conv(const ConvCase& t, const std::vector<float>& x,
                               const std::vector<float>& w, const std::vector<float>& b) {
  const int oh = t.h + 2 * t.pad - t.k + 1, ow = t.w + 2 * t.pad - t.k + 1;
  std::vector<double> y(static_cast<size_t>(t.batch) * t.oc * oh * ow);
  for (int n = 0; n < t.batch; ++n)
    for (int o = 0; o < t.oc; ++o)
      for (int i = 0; i < oh; ++i)
        for (int j = 0; j < ow; ++j) {
          double s = b[o];
          for (int c = 0; c < t.c; ++c)
            for (int ki = 0; ki < t.k; ++ki)
              for (int kj = 0; kj < t.k; ++kj) {
                const int ii = i + ki - t.pad, jj = j + kj - t.pad;
                if (ii < 0 || ii >= t.h || jj < 0 || jj >= t.w) continue;
                s += double{w[((o * t.c + c) * t.k + ki) * t.k + kj]} *
                     x[((n * t.c + c) * t.h + ii) * t.w + jj];
              }
          y[((n * t.oc + o) * oh + i) * ow + j] = s;
        }
  return y;
}

class Conv2dTest : public ::testing::TestWithParam<ConvCase> {};

TEST_P(Conv2dTest, ForwardMatchesNaiveLoopAndGradientsMatchFiniteDifferences) {
  const ConvCase t = GetParam();
  cm::Conv2d conv({.in_channels = t.c,
                   .out_channels = t.oc,
                   .kernel = t.k,
                   .height = t.h,
                   .width = t.w,
                   .padding = t.pad});
  std::vector<float> w = random_vector(conv.weight_size(), 1);
  std::vector<float> b = random_vector(conv.bias_size(), 2);
  std::vector<float> gw(w.size(), 0.0f), gb(b.size(), 0.0f);
  conv.bind(w, b, gw, gb);
  std::vector<float> x = random_vector(t.batch * conv.input_size(), 3);
  std::vector<float> y(t.batch * conv.output_size());
  const std::vector<float> r = random_vector(y.size(), 4);

  conv.forward(x, y, t.batch);
  const std::vector<double> ref = naive_conv(t, x, w, b);
  ASSERT_EQ(ref.size(), y.size());
  for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref[i], 1e-4) << "output " << i;

  std::vector<float> dx(x.size(), 7.0f);  // overwritten, not accumulated
  conv.backward(x, r, dx, t.batch);
  auto loss = [&] {
    conv.forward(x, y, t.batch);
    return dot(y, r);
  };
  const std::vector<float> gw_copy = gw, gb_copy = gb;
  expect_gradient_matches(x, dx, loss, "conv dx");
  expect_gradient_matches(w, gw_copy, loss, "conv dW");
  expect_gradient_matches(b, gb_copy, loss, "conv db");

  // A second backward adds the same gradient again; dx may be skipped.
  conv.backward(x, r, {}, t.batch);
  for (size_t i = 0; i < gw.size(); ++i) EXPECT_NEAR(gw[i], 2 * gw_copy[i], 1e-4);
  for (size_t i = 0; i < gb.size(); ++i) EXPECT_NEAR(gb[i], 2 * gb_copy[i], 1e-4);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Conv2dTest,
    ::testing::Values(ConvCase{1, 1, 1, 1, 1, 0, 1},    // 1x1 everything
                      ConvCase{2, 3, 3, 5, 4, 1, 2},    // same padding, non-square
                      ConvCase{3, 2, 5, 4, 4, 2, 1},    // kernel wider than half the image
                      ConvCase{2, 2, 3, 6, 5, 0, 3},    // valid convolution, odd batch
                      ConvCase{1, 4, 5, 7, 7, 2, 2}));  // the model's first layer, small

TEST(Conv2d, RejectsBadShapesWithClearErrors) {
  EXPECT_THROW(cm::Conv2d({.in_channels = 1,
                           .out_channels = 1,
                           .kernel = 4,
                           .height = 5,
                           .width = 5,
                           .padding = -1}),
               hvd::InvalidArgumentError);  // 'same' needs an odd kernel
  EXPECT_THROW(cm::Conv2d({.in_channels = 0,
                           .out_channels = 1,
                           .kernel = 3,
                           .height = 5,
                           .width = 5,
                           .padding = 1}),
               hvd::InvalidArgumentError);
  cm::Conv2d conv(
      {.in_channels = 1, .out_channels = 1, .kernel = 3, .height = 4, .width = 4, .padding = 1});
  std::vector<float> w(9), b(1), gw(9), gb(1), x(16), y(15);
  conv.bind(w, b, gw, gb);
  try {
    conv.forward(x, y, 1);
    FAIL() << "expected an error for a 15-float output buffer";
  } catch (const hvd::InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("15"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("16"), std::string::npos) << e.what();
  }
}

TEST(Dense, ForwardMatchesNaiveLoopAndGradientsMatchFiniteDifferences) {
  for (int batch : {1, 3}) {
    const int in = 7, out = 5;
    cm::Dense fc({.in_features = in, .out_features = out});
    std::vector<float> w = random_vector(in * out, 10), b = random_vector(out, 11);
    std::vector<float> gw(w.size(), 0.0f), gb(b.size(), 0.0f);
    fc.bind(w, b, gw, gb);
    std::vector<float> x = random_vector(batch * in, 12), y(batch * out);
    const std::vector<float> r = random_vector(y.size(), 13);
    fc.forward(x, y, batch);
    for (int n = 0; n < batch; ++n)
      for (int o = 0; o < out; ++o) {
        double s = b[o];
        for (int i = 0; i < in; ++i) s += double{w[o * in + i]} * x[n * in + i];
        EXPECT_NEAR(y[n * out + o], s, 1e-5);
      }
    std::vector<float> dx(x.size());
    fc.backward(x, r, dx, batch);
    auto loss = [&] {
      fc.forward(x, y, batch);
      return dot(y, r);
    };
    const std::vector<float> gw_copy = gw, gb_copy = gb;
    expect_gradient_matches(x, dx, loss, "dense dx");
    expect_gradient_matches(w, gw_copy, loss, "dense dW");
    expect_gradient_matches(b, gb_copy, loss, "dense db");
  }
}

TEST(Dense, EmptyBatchLeavesGradientsUntouched) {
  cm::Dense fc({.in_features = 3, .out_features = 2});
  std::vector<float> w(6, 1.0f), b(2, 1.0f), gw(6, 0.5f), gb(2, 0.5f);
  fc.bind(w, b, gw, gb);
  std::vector<float> none;
  fc.forward(none, none, 0);
  fc.backward(none, none, none, 0);
  for (float g : gw) EXPECT_EQ(g, 0.5f);
  for (float g : gb) EXPECT_EQ(g, 0.5f);
}

TEST(MaxPool2d, PicksTheWindowMaximumAndRoutesGradientToIt) {
  // One 4x4 plane, 2x2 windows.
  const std::vector<float> x = {1,  5,  2, 0,  //
                                3,  4,  9, 9,  // 9 twice: the first (row-major) wins
                                -1, -2, 7, 8,  //
                                -3, -4, 6, 8};
  cm::MaxPool2d pool({.channels = 1, .height = 4, .width = 4, .kernel = 2});
  std::vector<float> y(4);
  pool.forward(x, y, 1);
  EXPECT_EQ(y, (std::vector<float>{5, 9, -1, 8}));
  std::vector<float> dx(16, 3.0f);
  pool.backward(std::vector<float>{10, 20, 30, 40}, dx, 1);
  const std::vector<float> want = {0,  10, 0,  0,   //
                                   0,  0,  20, 0,   //
                                   30, 0,  0,  40,  //
                                   0,  0,  0,  0};
  EXPECT_EQ(dx, want);
}

TEST(MaxPool2d, AllEqualWindowRoutesToTopLeftAndOddSizesDropTheLastRowAndColumn) {
  cm::MaxPool2d pool({.channels = 2, .height = 5, .width = 3, .kernel = 2});
  EXPECT_EQ(pool.out_height(), 2);
  EXPECT_EQ(pool.out_width(), 1);
  std::vector<float> x(2 * 5 * 3, 1.0f), y(2 * 2 * 1), dx(x.size());
  pool.forward(x, y, 1);
  pool.backward(std::vector<float>{1, 2, 3, 4}, dx, 1);
  std::vector<float> want(x.size(), 0.0f);
  want[0] = 1;      // channel 0 window (0,0): element (0,0)
  want[2 * 3] = 2;  // window (1,0): element (2,0)
  want[15] = 3;     // channel 1
  want[15 + 2 * 3] = 4;
  EXPECT_EQ(dx, want);
}

TEST(MaxPool2d, GradientMatchesFiniteDifferencesAcrossBatchAndChannels) {
  const int batch = 2, c = 3, h = 4, w = 6;
  cm::MaxPool2d pool({.channels = c, .height = h, .width = w, .kernel = 2});
  // Distinct values 0.1 apart so a step of 1e-2 never changes a window's winner.
  std::vector<float> x(batch * c * h * w);
  std::mt19937 rng(5);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.1f * static_cast<float>(i);
  std::shuffle(x.begin(), x.end(), rng);
  std::vector<float> y(batch * pool.output_size()), dx(x.size());
  const std::vector<float> r = random_vector(y.size(), 6);
  pool.forward(x, y, batch);
  pool.backward(r, dx, batch);
  expect_gradient_matches(
      x, dx,
      [&] {
        pool.forward(x, y, batch);
        return dot(y, r);
      },
      "maxpool dx");
  EXPECT_THROW(pool.backward(r, dx, 1), hvd::InvalidArgumentError);  // batch differs from forward
}

TEST(Relu, ForwardClampsAndBackwardMasksByOutputInPlace) {
  std::vector<float> v = {-2.0f, -0.0f, 0.0f, 0.5f, 3.0f};
  cm::relu_forward(v, v);
  EXPECT_EQ(v, (std::vector<float>{0, 0, 0, 0.5f, 3.0f}));
  std::vector<float> g = {1, 2, 3, 4, 5};
  cm::relu_backward(v, g, g);
  EXPECT_EQ(g, (std::vector<float>{0, 0, 0, 4, 5}));
  std::vector<float> empty;
  cm::relu_forward(empty, empty);
  std::vector<float> short_buf(4);
  EXPECT_THROW(cm::relu_forward(v, short_buf), hvd::InvalidArgumentError);
}

TEST(SoftmaxCrossEntropy, UniformLogitsGiveLogOfClassCount) {
  cm::SoftmaxCrossEntropy ce(10);
  std::vector<float> z(3 * 10, 0.25f);
  const std::vector<int32_t> labels = {0, 9, 4};
  const cm::LossResult r = ce.forward(z, labels, 3);
  EXPECT_NEAR(r.loss, std::log(10.0), 1e-6);
  EXPECT_EQ(r.correct, 1);  // all tie: the first class is predicted, only label 0 matches
}

TEST(SoftmaxCrossEntropy, LossMatchesDoubleReferenceAndGradientMatchesFiniteDifferences) {
  const int batch = 3, classes = 4;
  cm::SoftmaxCrossEntropy ce(classes);
  std::vector<float> z = random_vector(batch * classes, 20, -3.0f, 3.0f);
  z[5] = 80.0f;  // large logit: must stay finite
  const std::vector<int32_t> labels = {2, 0, 3};
  double want = 0.0;
  for (int n = 0; n < batch; ++n) {
    double m = -1e300, s = 0.0;
    for (int c = 0; c < classes; ++c) m = std::max(m, double{z[n * classes + c]});
    for (int c = 0; c < classes; ++c) s += std::exp(z[n * classes + c] - m);
    want += -(z[n * classes + labels[n]] - m - std::log(s));
  }
  want /= batch;
  const cm::LossResult r = ce.forward(z, labels, batch);
  EXPECT_NEAR(r.loss, want, 1e-6);
  std::vector<float> dz(z.size());
  ce.backward(dz);
  for (int n = 0; n < batch; ++n) {
    double row = 0.0;
    for (int c = 0; c < classes; ++c) row += dz[n * classes + c];
    EXPECT_NEAR(row, 0.0, 1e-6) << "softmax gradient rows sum to zero";
  }
  expect_gradient_matches(
      z, dz, [&] { return ce.forward(z, labels, batch).loss; }, "ce dz", 1e-2f, 1e-2, 1e-4);
}

TEST(SoftmaxCrossEntropy, RejectsOutOfRangeLabelsAndHandlesEmptyBatch) {
  cm::SoftmaxCrossEntropy ce(3);
  std::vector<float> z(6);
  EXPECT_THROW(ce.forward(z, std::vector<int32_t>{0, 3}, 2), hvd::InvalidArgumentError);
  EXPECT_THROW(ce.forward(z, std::vector<int32_t>{-1, 0}, 2), hvd::InvalidArgumentError);
  std::vector<float> none;
  const cm::LossResult r = ce.forward(none, std::vector<int32_t>{}, 0);
  EXPECT_EQ(r.loss, 0.0);
  EXPECT_EQ(r.correct, 0);
  ce.backward(none);
}

TEST(SgdMomentum, FollowsThePyTorchUpdateRule) {
  std::vector<float> p = {1.0f, -2.0f};
  const std::vector<float> g = {0.5f, 1.0f};
  cm::SgdMomentum opt(2, {.momentum = 0.9f, .weight_decay = 0.1f});
  // Step 1: g' = g + 0.1 p = {0.6, 0.8}; v = g'; p -= 0.1 v.
  opt.step(p, g, 0.1f);
  EXPECT_NEAR(p[0], 1.0 - 0.06, 1e-6);
  EXPECT_NEAR(p[1], -2.0 - 0.08, 1e-6);
  // Step 2: g' = g + 0.1 p; v = 0.9 v + g'; p -= 0.05 v.
  const double g0 = 0.5 + 0.1 * 0.94, g1 = 1.0 + 0.1 * -2.08;
  const double v0 = 0.9 * 0.6 + g0, v1 = 0.9 * 0.8 + g1;
  opt.step(p, g, 0.05f);
  EXPECT_NEAR(p[0], 0.94 - 0.05 * v0, 1e-6);
  EXPECT_NEAR(p[1], -2.08 - 0.05 * v1, 1e-6);
  EXPECT_NEAR(opt.velocity()[0], v0, 1e-6);

  std::vector<float> q = {1.0f};
  cm::SgdMomentum nesterov(1, {.momentum = 0.5f, .nesterov = true});
  nesterov.step(q, std::vector<float>{2.0f}, 0.1f);  // v = 2; step = g + 0.5 v = 3
  EXPECT_NEAR(q[0], 0.7, 1e-6);
  nesterov.reset();
  EXPECT_EQ(nesterov.velocity()[0], 0.0f);

  EXPECT_THROW(cm::SgdMomentum(1, {.momentum = 1.0f}), hvd::InvalidArgumentError);
  EXPECT_THROW(opt.step(q, g, 0.1f), hvd::InvalidArgumentError);  // sizes differ
}

}  // namespace
