#include "gpu/sgd_momentum.h"

#include <cmath>
#include <string>

#include "gpu/kernels.h"
#include "hvd/error.h"
#include "model/check.h"

namespace train_cnn::gpu {

SgdMomentum::SgdMomentum(CudaContext& context, int64_t num_parameters,
                         const model::SgdMomentumOptions& options)
    : context_(context), options_(options), n_(num_parameters) {
  model::SgdMomentum validate(0, options);  // same checks and messages as the CPU optimizer
  if (num_parameters < 0) {
    throw hvd::InvalidArgumentError("SgdMomentum: num_parameters must be >= 0, got " +
                                    std::to_string(num_parameters) + ".");
  }
  context_.activate();
  velocity_.resize(static_cast<size_t>(n_));
  reset();
}

void SgdMomentum::step(float* params, const float* grads, float lr) {
  if (!std::isfinite(lr)) {
    throw hvd::InvalidArgumentError("SgdMomentum: learning rate must be finite, got " +
                                    std::to_string(lr) + ".");
  }
  if (n_ == 0) return;
  if (params == nullptr || grads == nullptr) {
    throw hvd::InvalidArgumentError("SgdMomentum::step: params and grads must be device pointers.");
  }
  sgd_momentum_step(params, grads, velocity_.data(), n_, lr, options_.momentum,
                    options_.weight_decay, options_.nesterov, context_.stream());
}

void SgdMomentum::reset() {
  if (n_ == 0) return;
  CNN_CUDA_CHECK(cudaMemsetAsync(velocity_.data(), 0, sizeof(float) * n_, context_.stream()));
}

void SgdMomentum::velocity_to_host(std::span<float> out) {
  model::check_buffer_size("SgdMomentum", "velocity", static_cast<int64_t>(out.size()), n_);
  if (n_ == 0) return;
  CNN_CUDA_CHECK(cudaMemcpyAsync(out.data(), velocity_.data(), sizeof(float) * n_,
                                 cudaMemcpyDeviceToHost, context_.stream()));
  context_.synchronize();
}

void SgdMomentum::velocity_from_host(std::span<const float> in) {
  model::check_buffer_size("SgdMomentum", "velocity", static_cast<int64_t>(in.size()), n_);
  if (n_ == 0) return;
  CNN_CUDA_CHECK(cudaMemcpyAsync(velocity_.data(), in.data(), sizeof(float) * n_,
                                 cudaMemcpyHostToDevice, context_.stream()));
  context_.synchronize();  // the host buffer may be reused as soon as this returns
}

}  // namespace train_cnn::gpu
