#include "gpu/relu.h"

#include <string>

#include "hvd/error.h"
#include "model/check.h"

namespace train_cnn::gpu {

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
  const float one = 1.0f, zero = 0.0f;
  CNN_CUDNN_CHECK(cudnnActivationForward(context_.cudnn(), act_desc_.get(), &one, desc_.get(), x,
                                         &zero, desc_.get(), y));
}

void CudnnRelu::backward(const void* y, const void* dy, void* dx, int batch) {
  if (batch == 0) return;
  set_batch(batch);
  const float one = 1.0f, zero = 0.0f;
  // x = y: the forward pass may have run in place; y > 0 exactly where x > 0.
  CNN_CUDNN_CHECK(cudnnActivationBackward(context_.cudnn(), act_desc_.get(), &one, desc_.get(), y,
                                          desc_.get(), dy, desc_.get(), y, &zero, desc_.get(), dx));
}

}  // namespace train_cnn::gpu
