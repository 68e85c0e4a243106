#pragma once

// Fully connected layer: y[N, out] = x[N, in] * W^T + b, with W stored [out, in] (the PyTorch
// layout, so checkpoints compare directly) and b [out]. One GEMM per pass over the whole batch.
//
// Parameters are not owned: bind() points the layer into the model's flat vectors. backward()
// ADDS into the weight and bias gradients; the owner zeroes them between steps.

#include <cstdint>
#include <span>

namespace train_cnn::model {

struct DenseOptions {
  int in_features = 1;
  int out_features = 1;
};

class Dense {
 public:
  explicit Dense(const DenseOptions& options);

  int64_t weight_size() const { return int64_t{in_} * out_; }
  int64_t bias_size() const { return out_; }
  int in_features() const { return in_; }
  int out_features() const { return out_; }

  void bind(std::span<float> weight, std::span<float> bias, std::span<float> weight_grad,
            std::span<float> bias_grad);

  void forward(std::span<const float> x, std::span<float> y, int batch) const;

  // Adds dL/dW = dy^T x and dL/db = column sums of dy; WRITES dL/dx = dy W unless dx is empty.
  void backward(std::span<const float> x, std::span<const float> dy, std::span<float> dx,
                int batch) const;

 private:
  int in_, out_;
  std::span<float> weight_, bias_, weight_grad_, bias_grad_;
};

}  // namespace train_cnn::model
