#include "gpu/relu.h"

#include <string>

#include "gpu/kernels.h"
#include "hvd/error.h"
#include "model/check.h"

namespace train_cnn::gpu {
namespace {

// A cuDNN status that says the configuration (here: the 16-bit data type) is not supported.
bool refused(cudnnStatus_t rc) {
  return CUDNN_STATUS_CATEGORY(rc) == CUDNN_STATUS_NOT_SUPPORTED ||
         CUDNN_STATUS_CATEGORY(rc) == CUDNN_STATUS_BAD_PARAM;
}

}  // namespace

CudnnRelu::CudnnRelu(CudaContext& context, int channels, int height, int width,
                     model::Precision precision)
    : context_(context),
      channels_(channels),
      height_(height),
      width_(width),
      precision_(precision) {
  model::check_positive("CudnnRelu", "channels", channels);
  model::check_positive("CudnnRelu", "height", height);
  model::check_positive("CudnnRelu", "width", width);
  context_.activate();
  CNN_CUDNN_CHECK(cudnnSetActivationDescriptor(act_desc_.get(), CUDNN_ACTIVATION_RELU,
                                               CUDNN_PROPAGATE_NAN, 0.0));
}

void CudnnRelu::set_batch(int batch) {
  if (batch < 0) {
    throw hvd::InvalidArgumentError("CudnnRelu: batch must be >= 0, got " + std::to_string(batch) +
                                    ".");
  }
  if (batch == batch_) return;
  set_nchw(desc_, batch, channels_, height_, width_, cudnn_data_type(precision_));
  batch_ = batch;
}

void CudnnRelu::forward(const void* x, void* y, int batch) {
  if (batch == 0) return;
  set_batch(batch);
  if (own_kernels_) {
    relu_forward_half(x, y, size() * batch, half_format(precision_), context_.stream());
    return;
  }
  const float one = 1.0f, zero = 0.0f;
  if (precision_ == model::Precision::kFp32) {
    CNN_CUDNN_CHECK(cudnnActivationForward(context_.cudnn(), act_desc_.get(), &one, desc_.get(), x,
                                           &zero, desc_.get(), y));
    return;
  }
  const cudnnStatus_t rc = cudnnActivationForward(context_.cudnn(), act_desc_.get(), &one,
                                                  desc_.get(), x, &zero, desc_.get(), y);
  if (rc == CUDNN_STATUS_SUCCESS) return;
  if (!refused(rc)) {
    throw_gpu_error("cudnnActivationForward(16-bit)", cudnn_error_text(rc), __FILE__, __LINE__);
  }
  own_kernels_ = true;
  relu_forward_half(x, y, size() * batch, half_format(precision_), context_.stream());
}

void CudnnRelu::backward(const void* y, const void* dy, void* dx, int batch) {
  if (batch == 0) return;
  set_batch(batch);
  if (own_kernels_) {
    relu_backward_half(y, dy, dx, size() * batch, half_format(precision_), context_.stream());
    return;
  }
  const float one = 1.0f, zero = 0.0f;
  // x = y: the forward pass may have run in place; y > 0 exactly where x > 0.
  if (precision_ == model::Precision::kFp32) {
    CNN_CUDNN_CHECK(cudnnActivationBackward(context_.cudnn(), act_desc_.get(), &one, desc_.get(), y,
                                            desc_.get(), dy, desc_.get(), y, &zero, desc_.get(),
                                            dx));
    return;
  }
  const cudnnStatus_t rc =
      cudnnActivationBackward(context_.cudnn(), act_desc_.get(), &one, desc_.get(), y, desc_.get(),
                              dy, desc_.get(), y, &zero, desc_.get(), dx);
  if (rc == CUDNN_STATUS_SUCCESS) return;
  if (!refused(rc)) {
    throw_gpu_error("cudnnActivationBackward(16-bit)", cudnn_error_text(rc), __FILE__, __LINE__);
  }
  own_kernels_ = true;
  relu_backward_half(y, dy, dx, size() * batch, half_format(precision_), context_.stream());
}

}  // namespace train_cnn::gpu
