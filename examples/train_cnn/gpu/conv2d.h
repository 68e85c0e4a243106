#pragma once

// 2-D convolution on the GPU with cuDNN: the same layer as model/conv2d.h (stride 1, zero
// padding, "same" by default, cross-correlation, NCHW, weight [OC, C, K, K], bias [OC]).
//
// Precision (model::Precision, gpu/data_type.h): fp32 stores and computes in float32 with
// CUDNN_FMA_MATH (or TF32 when the context allows it). bf16 / fp16 store x, y, the weight, the
// bias and all gradients in that 16-bit type and compute in float (PSEUDO_BFLOAT16_CONFIG /
// PSEUDO_HALF_CONFIG) with CUDNN_TENSOR_OP_MATH: tensor cores, float accumulation, one rounding
// of each output to 16 bits; the bias is added in float and rounded again (gpu/kernels.h,
// bias_add_half), and the weight gradient is accumulated by cuDNN in float into its 16-bit buffer
// (beta 1: round(old + new), as the CPU emulation rounds its float32 sum).
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
#include "gpu/data_type.h"
#include "gpu/device_buffer.h"
#include "model/conv2d.h"

namespace train_cnn::gpu {

class CudnnConv2d {
 public:
  CudnnConv2d(CudaContext& context, const model::Conv2dOptions& options,
              model::Precision precision = model::Precision::kFp32);

  int64_t weight_size() const { return int64_t{out_channels_} * in_channels_ * kernel_ * kernel_; }
  int64_t bias_size() const { return out_channels_; }
  int64_t input_size() const { return int64_t{in_channels_} * height_ * width_; }  // per sample
  int64_t output_size() const { return int64_t{out_channels_} * out_height_ * out_width_; }
  int out_height() const { return out_height_; }
  int out_width() const { return out_width_; }
  int out_channels() const { return out_channels_; }
  int fan_in() const { return in_channels_ * kernel_ * kernel_; }

  model::Precision precision() const { return precision_; }

  // Device arrays of the precision's storage type (float32, or 16-bit values).
  void bind(void* weight, void* bias, void* weight_grad, void* bias_grad);

  // y[batch, OC, OH, OW] = conv(x[batch, C, H, W]) + bias. batch 0 does nothing.
  void forward(const void* x, void* y, int batch);

  // Adds dL/dW and dL/db; WRITES dL/dx unless dx is null.
  void backward(const void* x, const void* dy, void* dx, int batch);

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
  model::Precision precision_;
  void* weight_ = nullptr;
  void* bias_ = nullptr;
  void* weight_grad_ = nullptr;
  void* bias_grad_ = nullptr;

  TensorDescriptor x_desc_, y_desc_;
  FilterDescriptor w_desc_;
  ConvolutionDescriptor conv_desc_;
  int batch_ = -1;  // the batch the tensor descriptors describe
  std::map<int, Plan> plans_;
};

}  // namespace train_cnn::gpu
