#pragma once

// Fully connected layer on the GPU with cuBLAS: the layer of model/dense.h, y[N, out] =
// x[N, in] W^T + b with W stored [out, in] (PyTorch layout) and b [out], all row-major.
//
// cuBLAS is column-major: a row-major [r, c] matrix is, read column-major with leading dimension
// c, its transpose [c, r]. In that view x is x^T [in, N], W is W^T [in, out], y is y^T [out, N]:
//   forward      y^T  = W x^T:     gemm(T, N, m out, n N,   k in,  W ld in, x ld in,   y ld out)
//   weight grad  dW^T += x^T dy:   gemm(N, T, m in,  n out, k N,   x ld in, dy ld out, dW ld in)
//   input grad   dx^T = W^T dy^T:  gemm(N, N, m in,  n N,   k out, W ld in, dy ld out, dx ld in)
// The bias is added (forward) and summed (backward) by the kernels of gpu/kernels.h.
// Device pointers; queued on the context's stream. backward() ADDS into the gradients.
//
// Precision (model::Precision, gpu/data_type.h): fp32 runs cublasSgemm (the context's math mode:
// FP32, or TF32 when allowed), as before. bf16 / fp16 store x, y, W, b and all gradients in that
// 16-bit type and run cublasGemmEx with CUDA_R_16BF / CUDA_R_16F for A, B and C and
// CUBLAS_COMPUTE_32F (float alpha and beta, float accumulation on tensor cores, each output rounded
// once to 16 bits; the weight gradient's beta 1 adds in float before that rounding). The model sets
// CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION on the handle for 16-bit models
// (CudaContext::set_fp32_reductions), so a split-K GEMM does not sum its partial products in
// 16 bits.

#include <cstdint>

#include "gpu/context.h"
#include "gpu/data_type.h"
#include "model/dense.h"

namespace train_cnn::gpu {

class CublasDense {
 public:
  CublasDense(CudaContext& context, const model::DenseOptions& options,
              model::Precision precision = model::Precision::kFp32);

  int64_t weight_size() const { return int64_t{in_} * out_; }
  int64_t bias_size() const { return out_; }
  int in_features() const { return in_; }
  int out_features() const { return out_; }

  model::Precision precision() const { return precision_; }

  // Device arrays of the precision's storage type (float32, or 16-bit values).
  void bind(void* weight, void* bias, void* weight_grad, void* bias_grad);

  void forward(const void* x, void* y, int batch);
  // Adds dL/dW = dy^T x and dL/db; WRITES dL/dx = dy W unless dx is null.
  void backward(const void* x, const void* dy, void* dx, int batch);

 private:
  // C = alpha op(A) op(B) + beta C (column-major, the shapes of the file comment) in the layer's
  // precision: cublasSgemm for fp32, cublasGemmEx with float compute for bf16 / fp16.
  void gemm(cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k, const void* a, int lda,
            const void* b, int ldb, float beta, void* c, int ldc);
  void add_bias(void* y, int batch);
  void sum_bias_grad(const void* dy, int batch);

  CudaContext& context_;
  int in_, out_;
  model::Precision precision_;
  void* weight_ = nullptr;
  void* bias_ = nullptr;
  void* weight_grad_ = nullptr;
  void* bias_grad_ = nullptr;
};

}  // namespace train_cnn::gpu
