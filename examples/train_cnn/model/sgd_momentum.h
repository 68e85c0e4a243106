#pragma once

// SGD with momentum over one flat parameter vector (the model's flat_parameters()), with the
// PyTorch update rule so that hyper-parameters carry over:
//   g = grad + weight_decay * p
//   v = momentum * v + g                     (v starts at 0, so the first step uses v = g)
//   p -= lr * (nesterov ? g + momentum * v : v)
// The learning rate is passed to every step() so schedules (warm-up, decay, linear scaling with the
// number of replicas) live in the trainer. velocity() exposes the optimizer state for broadcast
// from rank 0 and for checkpoints. Elementwise and sequential: deterministic.

#include <cstdint>
#include <span>
#include <vector>

namespace train_cnn::model {

struct SgdMomentumOptions {
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  bool nesterov = false;
};

class SgdMomentum {
 public:
  SgdMomentum(int64_t num_parameters, const SgdMomentumOptions& options);

  // params and grads must both hold num_parameters floats.
  void step(std::span<float> params, std::span<const float> grads, float lr);

  std::span<float> velocity() { return velocity_; }
  std::span<const float> velocity() const { return velocity_; }
  const SgdMomentumOptions& options() const { return options_; }
  void reset();  // velocity back to zero

 private:
  SgdMomentumOptions options_;
  std::vector<float> velocity_;
};

}  // namespace train_cnn::model
