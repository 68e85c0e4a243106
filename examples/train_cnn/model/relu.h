#pragma once

// ReLU, elementwise: y = max(x, 0). Stateless; in-place use (x and y the same buffer, dy and dx
// the same buffer) is allowed.

#include <span>

namespace train_cnn::model {

void relu_forward(std::span<const float> x, std::span<float> y);

// dx = dy where the forward OUTPUT y is > 0, else 0 (the gradient at exactly 0 is taken as 0).
void relu_backward(std::span<const float> y, std::span<const float> dy, std::span<float> dx);

}  // namespace train_cnn::model
