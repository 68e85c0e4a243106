#pragma once

// Fully connected layer on the GPU with cuBLAS: the layer of model/dense.h, y[N, out] =
// x[N, in] W^T + b with W stored [out, in] (PyTorch layout) and b [out], all row-major.
//
// cuBLAS is column-major: a row-major [r, c] matrix is, read column-major with leading dimension
// c, its transpose [c, r]. In that view x is x^T [in, N], W is W^T [in, out], y is y^T [out, N]:
//   forward       y^T  = W x^T:          gemm(T, N, m out, n N,   k in,  W ld in, x ld in,   y ld out)
//   weight grad   dW^T += x^T dy:        gemm(N, T, m in,  n out, k N,   x ld in, dy ld out, dW ld in)
//   input grad    dx^T = W^T dy^T:       gemm(N, N, m in,  n N,   k out, W ld in, dy ld out, dx ld in)
// The bias is added (forward) and summed (backward) by the kernels of gpu/kernels.h.
// Device pointers; queued on the context's stream. backward() ADDS into the gradients.

#include <cstdint>

#include "gpu/context.h"
#include "model/dense.h"

namespace train_cnn::gpu {

class CublasDense {
 public:
  CublasDense(CudaContext& context, const model::DenseOptions& options);

  int64_t weight_size() const { return int64_t{in_} * out_; }
  int64_t bias_size() const { return out_; }
  int in_features() const { return in_; }
  int out_features() const { return out_; }

  void bind(float* weight, float* bias, float* weight_grad, float* bias_grad);

  void forward(const float* x, float* y, int batch);
  // Adds dL/dW = dy^T x and dL/db; WRITES dL/dx = dy W unless dx is null.
  void backward(const float* x, const float* dy, float* dx, int batch);

 private:
  CudaContext& context_;
  int in_, out_;
  float* weight_ = nullptr;
  float* bias_ = nullptr;
  float* weight_grad_ = nullptr;
  float* bias_grad_ = nullptr;
};

}  // namespace train_cnn::gpu
