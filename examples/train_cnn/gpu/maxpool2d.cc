#include "gpu/maxpool2d.h"

#include <string>

#include "hvd/error.h"

namespace train_cnn::gpu {

CudnnMaxPool2d::CudnnMaxPool2d(CudaContext& context, const model::MaxPool2dOptions& o,
                               model::Precision precision)
    : context_(context),
      channels_(o.channels),
      height_(o.height),
      width_(o.width),
      kernel_(o.kernel),
      precision_(precision) {
  const model::MaxPool2d shape(o);  // validates with the CPU layer's messages
  out_height_ = shape.out_height();
  out_width_ = shape.out_width();
  context_.activate();
  CNN_CUDNN_CHECK(cudnnSetPooling2dDescriptor(pool_desc_.get(), CUDNN_POOLING_MAX_DETERMINISTIC,
                                              CUDNN_PROPAGATE_NAN, kernel_, kernel_, 0, 0, kernel_,
                                              kernel_));
}

void CudnnMaxPool2d::set_batch(int batch) {
  if (batch == batch_) return;
  set_nchw(x_desc_, batch, channels_, height_, width_, cudnn_data_type(precision_));
  set_nchw(y_desc_, batch, channels_, out_height_, out_width_, cudnn_data_type(precision_));
  int n = 0, c = 0, h = 0, w = 0;
  CNN_CUDNN_CHECK(
      cudnnGetPooling2dForwardOutputDim(pool_desc_.get(), x_desc_.get(), &n, &c, &h, &w));
  if (n != batch || c != channels_ || h != out_height_ || w != out_width_) {
    throw hvd::InternalError("CudnnMaxPool2d: cuDNN computes an output of " + std::to_string(h) +
                             "x" + std::to_string(w) + ", the CPU layer " +
                             std::to_string(out_height_) + "x" + std::to_string(out_width_) + ".");
  }
  batch_ = batch;
}

void CudnnMaxPool2d::forward(const void* x, void* y, int batch) {
  if (batch < 0) {
    throw hvd::InvalidArgumentError("CudnnMaxPool2d::forward: batch must be >= 0, got " +
                                    std::to_string(batch) + ".");
  }
  if (batch == 0) return;
  set_batch(batch);
  const float one = 1.0f, zero = 0.0f;
  CNN_CUDNN_CHECK(cudnnPoolingForward(context_.cudnn(), pool_desc_.get(), &one, x_desc_.get(), x,
                                      &zero, y_desc_.get(), y));
}

void CudnnMaxPool2d::backward(const void* x, const void* y, const void* dy, void* dx, int batch) {
  if (batch < 0) {
    throw hvd::InvalidArgumentError("CudnnMaxPool2d::backward: batch must be >= 0, got " +
                                    std::to_string(batch) + ".");
  }
  if (batch == 0) return;
  set_batch(batch);
  const float one = 1.0f, zero = 0.0f;
  CNN_CUDNN_CHECK(cudnnPoolingBackward(context_.cudnn(), pool_desc_.get(), &one, y_desc_.get(), y,
                                       y_desc_.get(), dy, x_desc_.get(), x, &zero, x_desc_.get(),
                                       dx));
}

}  // namespace train_cnn::gpu
