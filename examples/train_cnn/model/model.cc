#include "model/model.h"

#include <algorithm>
#include <string>

#include "hvd/error.h"
#include "model/check.h"
#include "model/gemm.h"
#include "model/init.h"

namespace train_cnn::model {
namespace {

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

}  // namespace

Model::Model(const ModelOptions& options)
    : options_(validated(options)),
      numerics_{.precision = options_.precision},
      graph_(CpuLayers{.numerics = &numerics_}, options_) {
  if (options_.blas_threads > 0) set_blas_threads(options_.blas_threads);

  const std::vector<ParameterSpec> specs = parameter_specs(options_);
  std::vector<int64_t> sizes;
  int64_t total = 0;
  for (const ParameterSpec& s : specs) {
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
  if (!numerics_.reduced()) {
    graph_.bind(parameters_);
    return;
  }
  // The layers read the rounded copy and write the float32 gradients.
  compute_params_.assign(static_cast<size_t>(total), 0.0f);
  compute_parameters_ = parameters_;
  for (ParameterTensor& p : compute_parameters_)
    p.value = std::span<float>(compute_params_.data() + p.offset, p.value.size());
  graph_.bind(compute_parameters_);
}

int64_t Model::input_size() const { return graph_.input_size(); }

void Model::initialize(uint64_t seed) {
  InitRng rng(seed);
  auto& p = parameters_;
  he_normal(p[0].value, graph_.conv1().fan_in(), rng);
  std::fill(p[1].value.begin(), p[1].value.end(), 0.0f);
  he_normal(p[2].value, graph_.conv2().fan_in(), rng);
  std::fill(p[3].value.begin(), p[3].value.end(), 0.0f);
  he_normal(p[4].value, graph_.fc1().in_features(), rng);
  std::fill(p[5].value.begin(), p[5].value.end(), 0.0f);
  glorot_uniform(p[6].value, graph_.fc2().in_features(), graph_.fc2().out_features(), rng);
  std::fill(p[7].value.begin(), p[7].value.end(), 0.0f);
}

void Model::zero_gradients() { std::fill(grads_.begin(), grads_.end(), 0.0f); }

LossResult Model::forward(std::span<const float> images, std::span<const int32_t> labels,
                          int batch) {
  check_forward_input("Model::forward", static_cast<int64_t>(images.size()), batch, input_size());
  graph_.reserve(batch);
  const std::span<float> input = graph_.input(batch);
  std::copy(images.begin(), images.end(), input.begin());
  if (numerics_.reduced()) {
    numerics_.round(input);
    std::copy(params_.begin(), params_.end(), compute_params_.begin());
    numerics_.round(compute_params_);
  }
  return graph_.forward(input, labels, batch);
}

std::span<const float> Model::logits() const { return graph_.logits(); }

void Model::backward(const std::function<void(size_t)>& on_grad_ready) {
  if (graph_.batch() < 0) {
    throw hvd::InvalidArgumentError("Model::backward called before forward().");
  }
  graph_.backward(on_grad_ready);
}

Model::Evaluation Model::evaluate(std::span<const float> images, std::span<const int32_t> labels,
                                  int64_t count, int batch) {
  return evaluate_in_chunks("Model::evaluate", *this, images, labels, count, batch);
}

}  // namespace train_cnn::model
