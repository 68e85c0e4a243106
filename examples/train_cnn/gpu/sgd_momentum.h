#pragma once

// SGD with momentum on the device: the optimizer of model/sgd_momentum.h (same options, same
// PyTorch rule, same validation), over one flat device vector of parameters and gradients (the
// GPU model's flat_parameters() / flat_gradients()). One kernel per step, queued on the context's
// stream; each multiply and add is rounded separately, so from the same parameters, gradients and
// velocity it gives bitwise the CPU optimizer's result.
//
// velocity_to_host / velocity_from_host move the optimizer state for broadcasts from rank 0 and
// checkpoints (which work on host tensors); they wait for the stream.

#include <cstdint>
#include <span>

#include "gpu/context.h"
#include "gpu/device_buffer.h"
#include "model/sgd_momentum.h"

namespace train_cnn::gpu {

class SgdMomentum {
 public:
  SgdMomentum(CudaContext& context, int64_t num_parameters,
              const model::SgdMomentumOptions& options);

  // params and grads: device vectors of num_parameters() floats.
  void step(float* params, const float* grads, float lr);

  int64_t num_parameters() const { return n_; }
  float* velocity() { return velocity_.data(); }  // device
  const model::SgdMomentumOptions& options() const { return options_; }
  void reset();  // velocity back to zero

  void velocity_to_host(std::span<float> out);
  void velocity_from_host(std::span<const float> in);

 private:
  CudaContext& context_;
  model::SgdMomentumOptions options_;
  int64_t n_;
  DeviceArray<float> velocity_;
};

}  // namespace train_cnn::gpu
