#include "model/model.h"

#include <algorithm>
#include <string>

#include "hvd/error.h"
#include "model/check.h"
#include "model/gemm.h"
#include "model/init.h"
#include "model/relu.h"

namespace train_cnn::model {
namespace {

Conv2dOptions conv1_options(const ModelOptions& o) {
  return {.in_channels = o.in_channels,
          .out_channels = o.conv1_channels,
          .kernel = o.kernel,
          .height = o.height,
          .width = o.width,
          .padding = -1};
}
MaxPool2dOptions pool1_options(const ModelOptions& o) {
  return {.channels = o.conv1_channels, .height = o.height, .width = o.width, .kernel = 2};
}
Conv2dOptions conv2_options(const ModelOptions& o) {
  return {.in_channels = o.conv1_channels,
          .out_channels = o.conv2_channels,
          .kernel = o.kernel,
          .height = o.height / 2,
          .width = o.width / 2,
          .padding = -1};
}
MaxPool2dOptions pool2_options(const ModelOptions& o) {
  return {.channels = o.conv2_channels, .height = o.height / 2, .width = o.width / 2, .kernel = 2};
}
int flat_features(const ModelOptions& o) {
  return o.conv2_channels * (o.height / 4) * (o.width / 4);
}

const ModelOptions& validated(const ModelOptions& o) {
  if (o.height < 4 || o.width < 4) {
    throw hvd::InvalidArgumentError("Model: images must be at least 4x4 (two 2x2 poolings), got " +
                                    std::to_string(o.height) + "x" + std::to_string(o.width) + ".");
  }
  if (o.blas_threads < 0) {
    throw hvd::InvalidArgumentError("Model: blas_threads must be >= 0, got " +
                                    std::to_string(o.blas_threads) + ".");
  }
  return o;
}

template <class T>
std::span<T> slice(std::vector<T>& v, int64_t n, int batch) {
  return std::span<T>(v.data(), static_cast<size_t>(n) * batch);
}

}  // namespace

Model::Model(const ModelOptions& options)
    : options_(validated(options)),
      conv1_(conv1_options(options)),
      pool1_(pool1_options(options)),
      conv2_(conv2_options(options)),
      pool2_(pool2_options(options)),
      fc1_({.in_features = flat_features(options), .out_features = options.hidden}),
      fc2_({.in_features = options.hidden, .out_features = options.num_classes}),
      loss_(options.num_classes) {
  if (options_.blas_threads > 0) set_blas_threads(options_.blas_threads);

  struct Spec {
    const char* name;
    std::vector<int64_t> shape;
  };
  const int k = options_.kernel;
  const std::vector<Spec> specs = {
      {"conv1.weight", {options_.conv1_channels, options_.in_channels, k, k}},
      {"conv1.bias", {options_.conv1_channels}},
      {"conv2.weight", {options_.conv2_channels, options_.conv1_channels, k, k}},
      {"conv2.bias", {options_.conv2_channels}},
      {"fc1.weight", {options_.hidden, flat_features(options_)}},
      {"fc1.bias", {options_.hidden}},
      {"fc2.weight", {options_.num_classes, options_.hidden}},
      {"fc2.bias", {options_.num_classes}},
  };
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (const Spec& s : specs) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    sizes.push_back(n);
    total += n;
  }
  params_.assign(static_cast<size_t>(total), 0.0f);
  grads_.assign(static_cast<size_t>(total), 0.0f);
  int64_t offset = 0;
  for (size_t i = 0; i < specs.size(); ++i) {
    parameters_.push_back({specs[i].name, specs[i].shape,
                           std::span<float>(params_.data() + offset, sizes[i]),
                           std::span<float>(grads_.data() + offset, sizes[i]), offset});
    offset += sizes[i];
  }
  auto& p = parameters_;
  conv1_.bind(p[0].value, p[1].value, p[0].gradient, p[1].gradient);
  conv2_.bind(p[2].value, p[3].value, p[2].gradient, p[3].gradient);
  fc1_.bind(p[4].value, p[5].value, p[4].gradient, p[5].gradient);
  fc2_.bind(p[6].value, p[7].value, p[6].gradient, p[7].gradient);
}

int64_t Model::input_size() const { return conv1_.input_size(); }

void Model::initialize(uint64_t seed) {
  InitRng rng(seed);
  auto& p = parameters_;
  he_normal(p[0].value, conv1_.fan_in(), rng);
  std::fill(p[1].value.begin(), p[1].value.end(), 0.0f);
  he_normal(p[2].value, conv2_.fan_in(), rng);
  std::fill(p[3].value.begin(), p[3].value.end(), 0.0f);
  he_normal(p[4].value, fc1_.in_features(), rng);
  std::fill(p[5].value.begin(), p[5].value.end(), 0.0f);
  glorot_uniform(p[6].value, fc2_.in_features(), fc2_.out_features(), rng);
  std::fill(p[7].value.begin(), p[7].value.end(), 0.0f);
}

void Model::zero_gradients() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

void Model::resize_activations(int batch) {
  const auto n = static_cast<size_t>(batch);
  input_.resize(n * conv1_.input_size());
  a1_.resize(n * conv1_.output_size());
  p1_.resize(n * pool1_.output_size());
  a2_.resize(n * conv2_.output_size());
  p2_.resize(n * pool2_.output_size());
  h_.resize(n * fc1_.out_features());
  logits_.resize(n * fc2_.out_features());
  d_logits_.resize(logits_.size());
  d_h_.resize(h_.size());
  d_p2_.resize(p2_.size());
  d_a2_.resize(a2_.size());
  d_p1_.resize(p1_.size());
  d_a1_.resize(a1_.size());
}

LossResult Model::forward(std::span<const float> images, std::span<const int32_t> labels,
                          int batch) {
  if (batch < 0) {
    throw hvd::InvalidArgumentError("Model::forward: batch must be >= 0, got " +
                                    std::to_string(batch) + ".");
  }
  check_buffer_size("Model::forward", "images", static_cast<int64_t>(images.size()),
                    int64_t{batch} * input_size());
  resize_activations(batch);
  batch_ = batch;
  std::copy(images.begin(), images.end(), input_.begin());

  auto a1 = slice(a1_, conv1_.output_size(), batch);
  auto p1 = slice(p1_, pool1_.output_size(), batch);
  auto a2 = slice(a2_, conv2_.output_size(), batch);
  auto p2 = slice(p2_, pool2_.output_size(), batch);
  auto h = slice(h_, fc1_.out_features(), batch);
  auto z = slice(logits_, fc2_.out_features(), batch);

  conv1_.forward(slice(input_, input_size(), batch), a1, batch);
  relu_forward(a1, a1);
  pool1_.forward(a1, p1, batch);
  conv2_.forward(p1, a2, batch);
  relu_forward(a2, a2);
  pool2_.forward(a2, p2, batch);
  fc1_.forward(p2, h, batch);
  relu_forward(h, h);
  fc2_.forward(h, z, batch);
  return loss_.forward(z, labels, batch);
}

std::span<const float> Model::logits() const {
  return std::span<const float>(logits_.data(),
                                static_cast<size_t>(std::max(batch_, 0)) * num_classes());
}

void Model::backward(const std::function<void(size_t)>& on_grad_ready) {
  if (batch_ < 0) {
    throw hvd::InvalidArgumentError("Model::backward called before forward().");
  }
  const int batch = batch_;
  auto ready = [&](size_t weight_index) {
    if (!on_grad_ready) return;
    on_grad_ready(weight_index + 1);  // bias
    on_grad_ready(weight_index);      // weight
  };
  auto p1 = slice(p1_, pool1_.output_size(), batch);
  auto a1 = slice(a1_, conv1_.output_size(), batch);
  auto a2 = slice(a2_, conv2_.output_size(), batch);
  auto p2 = slice(p2_, pool2_.output_size(), batch);
  auto h = slice(h_, fc1_.out_features(), batch);
  auto dz = slice(d_logits_, fc2_.out_features(), batch);
  auto dh = slice(d_h_, fc1_.out_features(), batch);
  auto dp2 = slice(d_p2_, pool2_.output_size(), batch);
  auto da2 = slice(d_a2_, conv2_.output_size(), batch);
  auto dp1 = slice(d_p1_, pool1_.output_size(), batch);
  auto da1 = slice(d_a1_, conv1_.output_size(), batch);

  loss_.backward(dz);
  fc2_.backward(h, dz, dh, batch);
  ready(6);
  relu_backward(h, dh, dh);
  fc1_.backward(p2, dh, dp2, batch);
  ready(4);
  pool2_.backward(dp2, da2, batch);
  relu_backward(a2, da2, da2);
  conv2_.backward(p1, da2, dp1, batch);
  ready(2);
  pool1_.backward(dp1, da1, batch);
  relu_backward(a1, da1, da1);
  conv1_.backward(slice(input_, input_size(), batch), da1, {}, batch);  // no input gradient
  ready(0);
}

Model::Evaluation Model::evaluate(std::span<const float> images, std::span<const int32_t> labels,
                                  int64_t count, int batch) {
  check_positive("Model::evaluate", "batch", batch);
  check_buffer_size("Model::evaluate", "images", static_cast<int64_t>(images.size()),
                    count * input_size());
  check_buffer_size("Model::evaluate", "labels", static_cast<int64_t>(labels.size()), count);
  Evaluation e;
  double loss_sum = 0.0;
  int64_t correct = 0;
  for (int64_t start = 0; start < count; start += batch) {
    const int b = static_cast<int>(std::min<int64_t>(batch, count - start));
    const LossResult r = forward(images.subspan(start * input_size(), b * input_size()),
                                 labels.subspan(start, b), b);
    loss_sum += r.loss * b;
    correct += r.correct;
  }
  e.count = count;
  if (count > 0) {
    e.loss = loss_sum / count;
    e.accuracy = static_cast<double>(correct) / count;
  }
  return e;
}

}  // namespace train_cnn::model
