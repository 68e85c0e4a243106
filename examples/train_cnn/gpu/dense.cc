#include "gpu/dense.h"

#include <string>

#include "gpu/kernels.h"
#include "hvd/error.h"

namespace train_cnn::gpu {

CublasDense::CublasDense(CudaContext& context, const model::DenseOptions& o,
                         model::Precision precision)
    : context_(context), in_(o.in_features), out_(o.out_features), precision_(precision) {
  const model::Dense shape(o);  // validates with the CPU layer's messages
}

void CublasDense::bind(void* weight, void* bias, void* weight_grad, void* bias_grad) {
  if (weight == nullptr || bias == nullptr || weight_grad == nullptr || bias_grad == nullptr) {
    throw hvd::InvalidArgumentError("CublasDense::bind: every parameter pointer must be non-null.");
  }
  weight_ = weight;
  bias_ = bias;
  weight_grad_ = weight_grad;
  bias_grad_ = bias_grad;
}

void CublasDense::gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                       const void* a, int lda, const void* b, int ldb, float beta, void* c,
                       int ldc) {
  const float one = 1.0f;
  if (precision_ == model::Precision::kFp32) {
    CNN_CUBLAS_CHECK(cublasSgemm(context_.cublas(), ta, tb, m, n, k, &one,
                                 static_cast<const float*>(a), lda, static_cast<const float*>(b),
                                 ldb, &beta, static_cast<float*>(c), ldc));
    return;
  }
  // CUBLAS_COMPUTE_32F: float accumulation and float alpha/beta (host pointers: the context's
  // CUBLAS_POINTER_MODE_HOST); CUBLAS_GEMM_DEFAULT lets cuBLAS pick a tensor-core kernel.
  const cudaDataType_t t = cuda_data_type(precision_);
  CNN_CUBLAS_CHECK(cublasGemmEx(context_.cublas(), ta, tb, m, n, k, &one, a, t, lda, b, t, ldb,
                                &beta, c, t, ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

void CublasDense::add_bias(void* y, int batch) {
  if (precision_ == model::Precision::kFp32) {
    bias_add(static_cast<float*>(y), static_cast<const float*>(bias_), batch, out_, 1,
             context_.stream());
  } else {
    bias_add_half(y, bias_, batch, out_, 1, half_format(precision_), context_.stream());
  }
}

void CublasDense::sum_bias_grad(const void* dy, int batch) {
  if (precision_ == model::Precision::kFp32) {
    bias_grad(static_cast<const float*>(dy), static_cast<float*>(bias_grad_), batch, out_, 1,
              context_.stream());
  } else {
    bias_grad_half(dy, bias_grad_, batch, out_, 1, half_format(precision_), context_.stream());
  }
}

void CublasDense::forward(const void* x, void* y, int batch) {
  if (batch < 0) {
    throw hvd::InvalidArgumentError("CublasDense::forward: batch must be >= 0, got " +
                                    std::to_string(batch) + ".");
  }
  if (batch == 0) return;
  if (weight_ == nullptr) throw hvd::InvalidArgumentError("CublasDense::forward before bind().");
  gemm(CUBLAS_OP_T, CUBLAS_OP_N, out_, batch, in_, weight_, in_, x, in_, 0.0f, y, out_);
  add_bias(y, batch);
}

void CublasDense::backward(const void* x, const void* dy, void* dx, int batch) {
  if (batch < 0) {
    throw hvd::InvalidArgumentError("CublasDense::backward: batch must be >= 0, got " +
                                    std::to_string(batch) + ".");
  }
  if (batch == 0) return;
  if (weight_ == nullptr) throw hvd::InvalidArgumentError("CublasDense::backward before bind().");
  gemm(CUBLAS_OP_N, CUBLAS_OP_T, in_, out_, batch, x, in_, dy, out_, 1.0f, weight_grad_, in_);
  sum_bias_grad(dy, batch);
  if (dx != nullptr) {
    gemm(CUBLAS_OP_N, CUBLAS_OP_N, in_, batch, out_, weight_, in_, dy, out_, 0.0f, dx, in_);
  }
}

}  // namespace train_cnn::gpu
