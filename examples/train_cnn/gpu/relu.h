#pragma once

// ReLU on the GPU with cuDNN (cudnnActivationForward/Backward, CUDNN_ACTIVATION_RELU, NaN
// propagated): the function of model/relu.h. In-place use (x == y, dy == dx) is allowed, as on the
// CPU; backward() needs only the forward OUTPUT y (passed to cuDNN as both y and x: y > 0 exactly
// where x > 0), so the forward pass may overwrite its input. Device pointers; queued on the
// context's stream. One instance per place in the network: the per-sample shape [C, H, W] is fixed
// at construction (the descriptors carry the real NCHW shape, as cuDNN expects), and so is the
// storage type (model::Precision: float32, or 16-bit values with float alpha/beta, gpu/data_type.h;
// ReLU only copies or zeroes values, so 16-bit results are exact). Should cuDNN refuse a 16-bit
// type (a NOT_SUPPORTED or BAD_PARAM status on the first 16-bit call; cuDNN 9's legacy activation
// calls are documented for HALF, BFLOAT16 has not been confirmed on a device), the layer switches
// to gpu/kernels.h's relu_forward_half / relu_backward_half for good: the same values.

#include <cstdint>

#include "gpu/context.h"
#include "gpu/data_type.h"
#include "gpu/device_buffer.h"

namespace train_cnn::gpu {

class CudnnRelu {
 public:
  CudnnRelu(CudaContext& context, int channels, int height, int width,
            model::Precision precision = model::Precision::kFp32);

  int64_t size() const { return int64_t{channels_} * height_ * width_; }  // per sample

  void forward(const void* x, void* y, int batch);
  // dx = dy where y > 0, else 0.
  void backward(const void* y, const void* dy, void* dx, int batch);

 private:
  void set_batch(int batch);

  CudaContext& context_;
  int channels_, height_, width_;
  model::Precision precision_;
  ActivationDescriptor act_desc_;
  TensorDescriptor desc_;
  int batch_ = -1;
  bool own_kernels_ = false;  // 16-bit only: cuDNN refused the type, our kernels run instead
};

}  // namespace train_cnn::gpu
