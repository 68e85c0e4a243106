#pragma once

// 2-D convolution on the GPU with cuDNN: the same layer as model/conv2d.h (stride 1, zero
// padding, "same" by default, cross-correlation, NCHW float32, weight [OC, C, K, K], bias [OC]).
//
//   forward:  cudnnConvolutionForward (beta 0), then the bias kernel (gpu/kernels.h)
//   backward: bias gradient by the bias kernel (adds), cudnnConvolutionBackwardFilter with beta 1
//             (adds into the weight gradient), cudnnConvolutionBackwardData with beta 0 (writes dx)
//
// Algorithms: per batch size, chosen once and cached (GpuOptions::conv_algorithms): cuDNN's _v7
// heuristics limited to deterministic algorithms and CUDNN_FMA_MATH unless TF32 is allowed, else
// the fixed deterministic set (IMPLICIT_PRECOMP_GEMM, BWD_DATA_ALGO_1, BWD_FILTER_ALGO_1). The
// workspace of each is sized by cudnnGet*WorkspaceSize and taken from the context.
//
// Pointers are device pointers. bind() points the layer at its parameters inside the model's flat
// device vectors; backward() ADDS into the gradients. Everything is queued on the context's stream.

#include <map>

#include "gpu/context.h"
#include "gpu/device_buffer.h"
#include "model/conv2d.h"

namespace train_cnn::gpu {

class CudnnConv2d {
 public:
  CudnnConv2d(CudaContext& context, const model::Conv2dOptions& options);

  int64_t weight_size() const { return int64_t{out_channels_} * in_channels_ * kernel_ * kernel_; }
  int64_t bias_size() const { return out_channels_; }
  int64_t input_size() const { return int64_t{in_channels_} * height_ * width_; }  // per sample
  int64_t output_size() const { return int64_t{out_channels_} * out_height_ * out_width_; }
  int out_height() const { return out_height_; }
  int out_width() const { return out_width_; }
  int out_channels() const { return out_channels_; }
  int fan_in() const { return in_channels_ * kernel_ * kernel_; }

  void bind(float* weight, float* bias, float* weight_grad, float* bias_grad);

  // y[batch, OC, OH, OW] = conv(x[batch, C, H, W]) + bias. batch 0 does nothing.
  void forward(const float* x, float* y, int batch);

  // Adds dL/dW and dL/db; WRITES dL/dx unless dx is null.
  void backward(const float* x, const float* dy, float* dx, int batch);

  // The algorithms chosen for a batch size (for logs and tests).
  struct Plan {
    cudnnConvolutionFwdAlgo_t forward;
    cudnnConvolutionBwdDataAlgo_t backward_data;
    cudnnConvolutionBwdFilterAlgo_t backward_filter;
    size_t forward_bytes = 0, backward_data_bytes = 0, backward_filter_bytes = 0;
  };
  const Plan& plan(int batch);

 private:
  void set_batch(int batch);  // descriptors and plan for this batch size

  CudaContext& context_;
  int in_channels_, out_channels_, kernel_, height_, width_, padding_;
  int out_height_, out_width_;
  float* weight_ = nullptr;
  float* bias_ = nullptr;
  float* weight_grad_ = nullptr;
  float* bias_grad_ = nullptr;

  TensorDescriptor x_desc_, y_desc_;
  FilterDescriptor w_desc_;
  ConvolutionDescriptor conv_desc_;
  int batch_ = -1;  // the batch the tensor descriptors describe
  std::map<int, Plan> plans_;
};

}  // namespace train_cnn::gpu
