#include "gpu/dense.h"

#include <string>

#include "gpu/kernels.h"
#include "hvd/error.h"

namespace train_cnn::gpu {

CublasDense::CublasDense(CudaContext& context, const model::DenseOptions& o)
    : context_(context), in_(o.in_features), out_(o.out_features) {
  const model::Dense shape(o);  // validates with the CPU layer's messages
}

void CublasDense::bind(float* weight, float* bias, float* weight_grad, float* bias_grad) {
  if (weight == nullptr || bias == nullptr || weight_grad == nullptr || bias_grad == nullptr) {
    throw hvd::InvalidArgumentError("CublasDense::bind: every parameter pointer must be non-null.");
  }
  weight_ = weight;
  bias_ = bias;
  weight_grad_ = weight_grad;
  bias_grad_ = bias_grad;
}

void CublasDense::forward(const float* x, float* y, int batch) {
  if (batch < 0) {
    throw hvd::InvalidArgumentError("CublasDense::forward: batch must be >= 0, got " +
                                    std::to_string(batch) + ".");
  }
  if (batch == 0) return;
  if (weight_ == nullptr) throw hvd::InvalidArgumentError("CublasDense::forward before bind().");
  const float one = 1.0f, zero = 0.0f;
  CNN_CUBLAS_CHECK(cublasSgemm(context_.cublas(), CUBLAS_OP_T, CUBLAS_OP_N, out_, batch, in_, &one,
                               weight_, in_, x, in_, &zero, y, out_));
  bias_add(y, bias_, batch, out_, 1, context_.stream());
}

void CublasDense::backward(const float* x, const float* dy, float* dx, int batch) {
  if (batch < 0) {
    throw hvd::InvalidArgumentError("CublasDense::backward: batch must be >= 0, got " +
                                    std::to_string(batch) + ".");
  }
  if (batch == 0) return;
  if (weight_ == nullptr) throw hvd::InvalidArgumentError("CublasDense::backward before bind().");
  const float one = 1.0f, zero = 0.0f;
  CNN_CUBLAS_CHECK(cublasSgemm(context_.cublas(), CUBLAS_OP_N, CUBLAS_OP_T, in_, out_, batch, &one,
                               x, in_, dy, out_, &one, weight_grad_, in_));
  bias_grad(dy, bias_grad_, batch, out_, 1, context_.stream());
  if (dx != nullptr) {
    CNN_CUBLAS_CHECK(cublasSgemm(context_.cublas(), CUBLAS_OP_N, CUBLAS_OP_N, in_, batch, out_,
                                 &one, weight_, in_, dy, out_, &zero, dx, in_));
  }
}

}  // namespace train_cnn::gpu
