#include "model/sgd_momentum.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "hvd/error.h"
#include "model/check.h"

namespace train_cnn::model {

SgdMomentum::SgdMomentum(int64_t num_parameters, const SgdMomentumOptions& options)
    : options_(options), velocity_(static_cast<size_t>(num_parameters), 0.0f) {
  if (!(options.momentum >= 0.0f && options.momentum < 1.0f) || !(options.weight_decay >= 0.0f)) {
    throw hvd::InvalidArgumentError(
        "SgdMomentum: momentum must be in [0, 1) and weight_decay >= 0, got momentum " +
        std::to_string(options.momentum) + " and weight_decay " +
        std::to_string(options.weight_decay) + ".");
  }
}

void SgdMomentum::step(std::span<float> params, std::span<const float> grads, float lr) {
  const auto n = static_cast<int64_t>(velocity_.size());
  check_buffer_size("SgdMomentum", "params", static_cast<int64_t>(params.size()), n);
  check_buffer_size("SgdMomentum", "grads", static_cast<int64_t>(grads.size()), n);
  if (!std::isfinite(lr)) {
    throw hvd::InvalidArgumentError("SgdMomentum: learning rate must be finite, got " +
                                    std::to_string(lr) + ".");
  }
  const float mu = options_.momentum, wd = options_.weight_decay;
  float* v = velocity_.data();
  for (int64_t i = 0; i < n; ++i) {
    const float g = grads[i] + wd * params[i];
    v[i] = mu * v[i] + g;
    params[i] -= lr * (options_.nesterov ? g + mu * v[i] : v[i]);
  }
}

void SgdMomentum::reset() { std::fill(velocity_.begin(), velocity_.end(), 0.0f); }

}  // namespace train_cnn::model
