#pragma once

// Max pooling on the GPU with cuDNN: the layer of model/maxpool2d.h (K x K window, stride K, no
// padding, floor output size), CUDNN_POOLING_MAX_DETERMINISTIC. cuDNN keeps no routing table:
// backward() takes the forward input and output again and routes each output gradient to the
// maximum of its window. On ties (only at exact equality; after a ReLU, typically all-zero
// windows whose gradient the ReLU then zeroes) the element chosen may differ from the CPU
// layer's first maximum. Device pointers; queued on the context's stream. The storage type is
// fixed at construction (model::Precision: float32, or 16-bit values with float alpha/beta,
// gpu/data_type.h); pooling only moves values, so 16-bit results are exact.

#include <cstdint>

#include "gpu/context.h"
#include "gpu/data_type.h"
#include "gpu/device_buffer.h"
#include "model/maxpool2d.h"

namespace train_cnn::gpu {

class CudnnMaxPool2d {
 public:
  CudnnMaxPool2d(CudaContext& context, const model::MaxPool2dOptions& options,
                 model::Precision precision = model::Precision::kFp32);

  int64_t input_size() const { return int64_t{channels_} * height_ * width_; }  // per sample
  int64_t output_size() const { return int64_t{channels_} * out_height_ * out_width_; }
  int out_height() const { return out_height_; }
  int out_width() const { return out_width_; }

  void forward(const void* x, void* y, int batch);
  // WRITES dx from the forward input x, output y and dL/dy.
  void backward(const void* x, const void* y, const void* dy, void* dx, int batch);

 private:
  void set_batch(int batch);

  CudaContext& context_;
  int channels_, height_, width_, kernel_, out_height_, out_width_;
  model::Precision precision_;
  PoolingDescriptor pool_desc_;
  TensorDescriptor x_desc_, y_desc_;
  int batch_ = -1;
};

}  // namespace train_cnn::gpu
