#include "model/dense.h"

#include <algorithm>

#include "model/check.h"
#include "model/gemm.h"

namespace train_cnn::model {

Dense::Dense(const DenseOptions& o) : in_(o.in_features), out_(o.out_features) {
  check_positive("Dense", "in_features", in_);
  check_positive("Dense", "out_features", out_);
}

void Dense::bind(std::span<float> weight, std::span<float> bias, std::span<float> weight_grad,
                 std::span<float> bias_grad) {
  check_buffer_size("Dense", "weight", static_cast<int64_t>(weight.size()), weight_size());
  check_buffer_size("Dense", "bias", static_cast<int64_t>(bias.size()), bias_size());
  check_buffer_size("Dense", "weight_grad", static_cast<int64_t>(weight_grad.size()),
                    weight_size());
  check_buffer_size("Dense", "bias_grad", static_cast<int64_t>(bias_grad.size()), bias_size());
  weight_ = weight;
  bias_ = bias;
  weight_grad_ = weight_grad;
  bias_grad_ = bias_grad;
}

void Dense::forward(std::span<const float> x, std::span<float> y, int batch) const {
  check_buffer_size("Dense", "x", static_cast<int64_t>(x.size()), int64_t{batch} * in_);
  check_buffer_size("Dense", "y", static_cast<int64_t>(y.size()), int64_t{batch} * out_);
  for (int n = 0; n < batch; ++n) {
    std::copy(bias_.begin(), bias_.end(), y.begin() + static_cast<size_t>(n) * out_);
  }
  gemm(Trans::kNo, Trans::kYes, batch, out_, in_, 1.0f, x.data(), weight_.data(), 1.0f, y.data());
}

void Dense::backward(std::span<const float> x, std::span<const float> dy, std::span<float> dx,
                     int batch) const {
  check_buffer_size("Dense", "x", static_cast<int64_t>(x.size()), int64_t{batch} * in_);
  check_buffer_size("Dense", "dy", static_cast<int64_t>(dy.size()), int64_t{batch} * out_);
  // dW[out, in] += dy[N, out]^T * x[N, in]
  gemm(Trans::kYes, Trans::kNo, out_, in_, batch, 1.0f, dy.data(), x.data(), 1.0f,
       weight_grad_.data());
  for (int n = 0; n < batch; ++n) {
    const float* r = dy.data() + static_cast<size_t>(n) * out_;
    for (int o = 0; o < out_; ++o) bias_grad_[o] += r[o];
  }
  if (!dx.empty()) {
    check_buffer_size("Dense", "dx", static_cast<int64_t>(dx.size()), int64_t{batch} * in_);
    // dx[N, in] = dy[N, out] * W[out, in]
    gemm(Trans::kNo, Trans::kNo, batch, in_, out_, 1.0f, dy.data(), weight_.data(), 0.0f,
         dx.data());
  }
}

}  // namespace train_cnn::model
