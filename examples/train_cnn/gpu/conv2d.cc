#include "gpu/conv2d.h"

#include <string>
#include <vector>

#include "gpu/kernels.h"
#include "hvd/error.h"

namespace train_cnn::gpu {
namespace {

bool tensor_op_math(cudnnMathType_t m) {
  return m == CUDNN_TENSOR_OP_MATH || m == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
}

// Whether a heuristic result may be used: it ran, it is deterministic, and its math is what the
// layer allows (never the down-conversion of float data to FP16; tensor cores only with TF32
// allowed or with 16-bit data, whose tensor-core math is what mixed precision is for).
template <class Perf>
bool acceptable(const Perf& r, bool allow_tensor_ops) {
  if (r.status != CUDNN_STATUS_SUCCESS || r.determinism != CUDNN_DETERMINISTIC) return false;
  if (r.mathType == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION) return false;
  return allow_tensor_ops || !tensor_op_math(r.mathType);
}

}  // namespace

CudnnConv2d::CudnnConv2d(CudaContext& context, const model::Conv2dOptions& o,
                         model::Precision precision)
    : context_(context),
      in_channels_(o.in_channels),
      out_channels_(o.out_channels),
      kernel_(o.kernel),
      height_(o.height),
      width_(o.width),
      padding_(o.padding < 0 ? o.kernel / 2 : o.padding) {
  // The CPU layer validates the shape with the same messages (and says what to fix).
  const model::Conv2d shape(o);
  out_height_ = shape.out_height();
  out_width_ = shape.out_width();
  precision_ = precision;

  context_.activate();
  // The filter has the data's type; the convolution computes in float whatever the data type
  // (16-bit data: PSEUDO_HALF_CONFIG / PSEUDO_BFLOAT16_CONFIG, gpu/data_type.h). 16-bit data may
  // use tensor cores (CUDNN_TENSOR_OP_MATH); float32 data keeps the context's math (FMA, or TF32).
  CNN_CUDNN_CHECK(cudnnSetFilter4dDescriptor(w_desc_.get(), cudnn_data_type(precision_),
                                             CUDNN_TENSOR_NCHW, out_channels_, in_channels_,
                                             kernel_, kernel_));
  CNN_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv_desc_.get(), padding_, padding_, 1, 1, 1, 1,
                                                  CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CNN_CUDNN_CHECK(cudnnSetConvolutionMathType(
      conv_desc_.get(),
      precision_ == model::Precision::kFp32 ? context_.conv_math_type() : CUDNN_TENSOR_OP_MATH));
}

void CudnnConv2d::bind(void* weight, void* bias, void* weight_grad, void* bias_grad) {
  if (weight == nullptr || bias == nullptr || weight_grad == nullptr || bias_grad == nullptr) {
    throw hvd::InvalidArgumentError("CudnnConv2d::bind: every parameter pointer must be non-null.");
  }
  weight_ = weight;
  bias_ = bias;
  weight_grad_ = weight_grad;
  bias_grad_ = bias_grad;
}

void CudnnConv2d::set_batch(int batch) {
  if (batch == batch_) return;
  set_nchw(x_desc_, batch, in_channels_, height_, width_, cudnn_data_type(precision_));
  set_nchw(y_desc_, batch, out_channels_, out_height_, out_width_, cudnn_data_type(precision_));
  int n = 0, c = 0, h = 0, w = 0;
  CNN_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv_desc_.get(), x_desc_.get(),
                                                        w_desc_.get(), &n, &c, &h, &w));
  if (n != batch || c != out_channels_ || h != out_height_ || w != out_width_) {
    throw hvd::InternalError("CudnnConv2d: cuDNN computes an output of [" + std::to_string(n) +
                             "," + std::to_string(c) + "," + std::to_string(h) + "," +
                             std::to_string(w) + "], the CPU layer [" + std::to_string(batch) +
                             "," + std::to_string(out_channels_) + "," +
                             std::to_string(out_height_) + "," + std::to_string(out_width_) + "].");
  }
  batch_ = batch;
}

const CudnnConv2d::Plan& CudnnConv2d::plan(int batch) {
  set_batch(batch);
  if (auto it = plans_.find(batch); it != plans_.end()) return it->second;

  cudnnHandle_t h = context_.cudnn();
  const bool tensor_ops = context_.options().allow_tf32 || precision_ != model::Precision::kFp32;
  const bool heuristic = context_.options().conv_algorithms == ConvAlgorithms::kHeuristic;
  const size_t limit = CudaContext::kMaxWorkspaceBytes;
  Plan p{CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1,
         CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1};

  // Forward. A candidate is taken only when its workspace query succeeds (it supports this shape).
  bool found = false;
  if (heuristic) {
    int max_count = 0;
    CNN_CUDNN_CHECK(cudnnGetConvolutionForwardAlgorithmMaxCount(h, &max_count));
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(max_count));
    int count = 0;
    if (max_count > 0 && cudnnGetConvolutionForwardAlgorithm_v7(
                             h, x_desc_.get(), w_desc_.get(), conv_desc_.get(), y_desc_.get(),
                             max_count, &count, perf.data()) == CUDNN_STATUS_SUCCESS) {
      for (int i = 0; i < count && !found; ++i) {
        size_t bytes = 0;
        if (acceptable(perf[i], tensor_ops) &&
            cudnnGetConvolutionForwardWorkspaceSize(h, x_desc_.get(), w_desc_.get(),
                                                    conv_desc_.get(), y_desc_.get(), perf[i].algo,
                                                    &bytes) == CUDNN_STATUS_SUCCESS &&
            bytes <= limit) {
          p.forward = perf[i].algo;
          p.forward_bytes = bytes;
          found = true;
        }
      }
    }
  }
  if (!found) {
    CNN_CUDNN_CHECK(cudnnGetConvolutionForwardWorkspaceSize(h, x_desc_.get(), w_desc_.get(),
                                                            conv_desc_.get(), y_desc_.get(),
                                                            p.forward, &p.forward_bytes));
  }

  // Backward data.
  found = false;
  if (heuristic) {
    int max_count = 0;
    CNN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(h, &max_count));
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(max_count));
    int count = 0;
    if (max_count > 0 && cudnnGetConvolutionBackwardDataAlgorithm_v7(
                             h, w_desc_.get(), y_desc_.get(), conv_desc_.get(), x_desc_.get(),
                             max_count, &count, perf.data()) == CUDNN_STATUS_SUCCESS) {
      for (int i = 0; i < count && !found; ++i) {
        size_t bytes = 0;
        if (acceptable(perf[i], tensor_ops) &&
            cudnnGetConvolutionBackwardDataWorkspaceSize(
                h, w_desc_.get(), y_desc_.get(), conv_desc_.get(), x_desc_.get(), perf[i].algo,
                &bytes) == CUDNN_STATUS_SUCCESS &&
            bytes <= limit) {
          p.backward_data = perf[i].algo;
          p.backward_data_bytes = bytes;
          found = true;
        }
      }
    }
  }
  if (!found) {
    CNN_CUDNN_CHECK(cudnnGetConvolutionBackwardDataWorkspaceSize(
        h, w_desc_.get(), y_desc_.get(), conv_desc_.get(), x_desc_.get(), p.backward_data,
        &p.backward_data_bytes));
  }

  // Backward filter.
  found = false;
  if (heuristic) {
    int max_count = 0;
    CNN_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(h, &max_count));
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(max_count));
    int count = 0;
    if (max_count > 0 && cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                             h, x_desc_.get(), y_desc_.get(), conv_desc_.get(), w_desc_.get(),
                             max_count, &count, perf.data()) == CUDNN_STATUS_SUCCESS) {
      for (int i = 0; i < count && !found; ++i) {
        size_t bytes = 0;
        if (acceptable(perf[i], tensor_ops) &&
            cudnnGetConvolutionBackwardFilterWorkspaceSize(
                h, x_desc_.get(), y_desc_.get(), conv_desc_.get(), w_desc_.get(), perf[i].algo,
                &bytes) == CUDNN_STATUS_SUCCESS &&
            bytes <= limit) {
          p.backward_filter = perf[i].algo;
          p.backward_filter_bytes = bytes;
          found = true;
        }
      }
    }
  }
  if (!found) {
    CNN_CUDNN_CHECK(cudnnGetConvolutionBackwardFilterWorkspaceSize(
        h, x_desc_.get(), y_desc_.get(), conv_desc_.get(), w_desc_.get(), p.backward_filter,
        &p.backward_filter_bytes));
  }
  return plans_.emplace(batch, p).first->second;
}

void CudnnConv2d::forward(const void* x, void* y, int batch) {
  if (batch < 0) {
    throw hvd::InvalidArgumentError("CudnnConv2d::forward: batch must be >= 0, got " +
                                    std::to_string(batch) + ".");
  }
  if (batch == 0) return;
  if (weight_ == nullptr) {
    throw hvd::InvalidArgumentError("CudnnConv2d::forward called before bind().");
  }
  const Plan& p = plan(batch);
  void* ws = context_.workspace(p.forward_bytes);
  // float alpha and beta for float32, HALF and BFLOAT16 data alike (gpu/data_type.h).
  const float one = 1.0f, zero = 0.0f;
  CNN_CUDNN_CHECK(cudnnConvolutionForward(context_.cudnn(), &one, x_desc_.get(), x, w_desc_.get(),
                                          weight_, conv_desc_.get(), p.forward, ws, p.forward_bytes,
                                          &zero, y_desc_.get(), y));
  if (precision_ == model::Precision::kFp32) {
    bias_add(static_cast<float*>(y), static_cast<const float*>(bias_), batch, out_channels_,
             out_height_ * out_width_, context_.stream());
  } else {
    bias_add_half(y, bias_, batch, out_channels_, out_height_ * out_width_, half_format(precision_),
                  context_.stream());
  }
}

void CudnnConv2d::backward(const void* x, const void* dy, void* dx, int batch) {
  if (batch < 0) {
    throw hvd::InvalidArgumentError("CudnnConv2d::backward: batch must be >= 0, got " +
                                    std::to_string(batch) + ".");
  }
  if (batch == 0) return;
  if (weight_ == nullptr) {
    throw hvd::InvalidArgumentError("CudnnConv2d::backward called before bind().");
  }
  const Plan& p = plan(batch);
  const float one = 1.0f, zero = 0.0f;
  if (precision_ == model::Precision::kFp32) {
    bias_grad(static_cast<const float*>(dy), static_cast<float*>(bias_grad_), batch, out_channels_,
              out_height_ * out_width_, context_.stream());
  } else {
    bias_grad_half(dy, bias_grad_, batch, out_channels_, out_height_ * out_width_,
                   half_format(precision_), context_.stream());
  }
  void* ws = context_.workspace(p.backward_filter_bytes);
  CNN_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
      context_.cudnn(), &one, x_desc_.get(), x, y_desc_.get(), dy, conv_desc_.get(),
      p.backward_filter, ws, p.backward_filter_bytes, &one, w_desc_.get(), weight_grad_));
  if (dx != nullptr) {
    ws = context_.workspace(p.backward_data_bytes);
    CNN_CUDNN_CHECK(cudnnConvolutionBackwardData(
        context_.cudnn(), &one, w_desc_.get(), weight_, y_desc_.get(), dy, conv_desc_.get(),
        p.backward_data, ws, p.backward_data_bytes, &zero, x_desc_.get(), dx));
  }
}

}  // namespace train_cnn::gpu
