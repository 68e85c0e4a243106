#pragma once

// 2-D convolution, stride 1, zero padding, NCHW float32, batch-major.
//
// Algorithm (per sample): im2col turns the padded input [C,H,W] into a matrix
// col[C*K*K, OH*OW]; the convolution is then one GEMM  y[OC, OH*OW] = W[OC, C*K*K] * col.
// Backward reuses the same matrix:  dW += dy * col^T,  db += row sums of dy, and
// dcol = W^T * dy, which col2im scatters (adds) back onto the input positions it came from.
// Samples are processed one after another in a fixed order, so results are deterministic and a
// sample's output does not depend on the other samples in the batch.
//
// Parameters are not owned: bind() points the layer at weight [OC, C, K, K] and bias [OC] (and
// their gradients) inside the model's flat vectors. backward() ADDS into the gradients; the owner
// zeroes them between steps. Not thread-safe (the im2col scratch buffer is a member).

#include <cstdint>
#include <span>
#include <vector>

namespace train_cnn::model {

struct Conv2dOptions {
  int in_channels = 1;
  int out_channels = 1;
  int kernel = 3;    // square kernel K x K
  int height = 1;    // input height
  int width = 1;     // input width
  int padding = -1;  // zero padding on each side; -1 = "same" (K/2, needs an odd K)
};

class Conv2d {
 public:
  explicit Conv2d(const Conv2dOptions& options);

  int64_t weight_size() const { return int64_t{out_channels_} * in_channels_ * kernel_ * kernel_; }
  int64_t bias_size() const { return out_channels_; }
  int64_t input_size() const { return int64_t{in_channels_} * height_ * width_; }  // per sample
  int64_t output_size() const { return int64_t{out_channels_} * out_height_ * out_width_; }
  int out_height() const { return out_height_; }
  int out_width() const { return out_width_; }
  int out_channels() const { return out_channels_; }
  int fan_in() const { return in_channels_ * kernel_ * kernel_; }

  void bind(std::span<float> weight, std::span<float> bias, std::span<float> weight_grad,
            std::span<float> bias_grad);

  // y[batch, OC, OH, OW] = conv(x[batch, C, H, W]) + bias.
  void forward(std::span<const float> x, std::span<float> y, int batch);

  // Given the forward input x and dL/dy, adds dL/dW and dL/db into the bound gradients and, when
  // dx is not empty, WRITES dL/dx (dx may be skipped for the first layer).
  void backward(std::span<const float> x, std::span<const float> dy, std::span<float> dx,
                int batch);

 private:
  void im2col(const float* x, float* col) const;
  void col2im(const float* col, float* x) const;

  int in_channels_, out_channels_, kernel_, height_, width_, padding_;
  int out_height_, out_width_;
  std::span<float> weight_, bias_, weight_grad_, bias_grad_;
  std::vector<float> col_;  // [C*K*K, OH*OW] scratch
};

}  // namespace train_cnn::model
