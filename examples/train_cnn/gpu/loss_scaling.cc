#include "gpu/loss_scaling.h"

#include <cmath>
#include <string>

#include "gpu/check.h"
#include "gpu/kernels.h"
#include "hvd/error.h"

namespace train_cnn::gpu {

DeviceGradientUnscaler::DeviceGradientUnscaler() : flag_(1) { host_flag_.reserve(1); }

bool DeviceGradientUnscaler::unscale(float* grads, int64_t n, double scale, cudaStream_t stream) {
  if (!std::isfinite(scale) || scale <= 0) {
    throw hvd::InvalidArgumentError(
        "DeviceGradientUnscaler::unscale: the loss scale must be finite and > 0, got " +
        std::to_string(scale) + ".");
  }
  if (n < 0 || (n > 0 && grads == nullptr)) {
    throw hvd::InvalidArgumentError(
        "DeviceGradientUnscaler::unscale: expected n >= 0 device floats, got n = " +
        std::to_string(n) + (grads == nullptr ? " and a null pointer." : "."));
  }
  CNN_CUDA_CHECK(cudaMemsetAsync(flag_.data(), 0, sizeof(int32_t), stream));
  unscale_and_check(grads, n, static_cast<float>(1.0 / scale), flag_.data(), stream);
  CNN_CUDA_CHECK(cudaMemcpyAsync(host_flag_.data(), flag_.data(), sizeof(int32_t),
                                 cudaMemcpyDeviceToHost, stream));
  CNN_CUDA_CHECK(cudaStreamSynchronize(stream));
  return host_flag_.data()[0] != 0;
}

}  // namespace train_cnn::gpu
