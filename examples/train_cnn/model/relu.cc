#include "model/relu.h"

#include "model/check.h"

namespace train_cnn::model {

void relu_forward(std::span<const float> x, std::span<float> y) {
  check_buffer_size("ReLU", "y", static_cast<int64_t>(y.size()), static_cast<int64_t>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void relu_backward(std::span<const float> y, std::span<const float> dy, std::span<float> dx) {
  check_buffer_size("ReLU", "dy", static_cast<int64_t>(dy.size()), static_cast<int64_t>(y.size()));
  check_buffer_size("ReLU", "dx", static_cast<int64_t>(dx.size()), static_cast<int64_t>(y.size()));
  for (size_t i = 0; i < y.size(); ++i) dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

}  // namespace train_cnn::model
