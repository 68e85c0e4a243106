#pragma once

// Max pooling with a square K x K window and stride K (non-overlapping), NCHW float32.
// Output size is floor(H/K) x floor(W/K); trailing rows/columns that do not fill a window are
// dropped (as in PyTorch with ceil_mode=false).
//
// forward() remembers, for every output, which input element won (the first maximum in row-major
// window order when several are equal). backward() routes each output gradient to that element
// only; every other input gets zero. Not thread-safe (the routing table is a member).

#include <cstdint>
#include <span>
#include <vector>

namespace train_cnn::model {

struct MaxPool2dOptions {
  int channels = 1;
  int height = 1;
  int width = 1;
  int kernel = 2;  // window and stride
};

class MaxPool2d {
 public:
  explicit MaxPool2d(const MaxPool2dOptions& options);

  int64_t input_size() const { return int64_t{channels_} * height_ * width_; }  // per sample
  int64_t output_size() const { return int64_t{channels_} * out_height_ * out_width_; }
  int out_height() const { return out_height_; }
  int out_width() const { return out_width_; }

  void forward(std::span<const float> x, std::span<float> y, int batch);
  // WRITES dx (zero except at the winners of the last forward(), which receive dy).
  void backward(std::span<const float> dy, std::span<float> dx, int batch) const;

 private:
  int channels_, height_, width_, kernel_, out_height_, out_width_;
  int batch_ = 0;                // batch of the last forward()
  std::vector<int32_t> argmax_;  // per output: index of the winner within its sample
};

}  // namespace train_cnn::model
