#include "model/maxpool2d.h"

#include <algorithm>
#include <string>

#include "hvd/error.h"
#include "model/check.h"

namespace train_cnn::model {

MaxPool2d::MaxPool2d(const MaxPool2dOptions& o)
    : channels_(o.channels), height_(o.height), width_(o.width), kernel_(o.kernel) {
  check_positive("MaxPool2d", "channels", channels_);
  check_positive("MaxPool2d", "height", height_);
  check_positive("MaxPool2d", "width", width_);
  check_positive("MaxPool2d", "kernel", kernel_);
  out_height_ = height_ / kernel_;
  out_width_ = width_ / kernel_;
  if (out_height_ == 0 || out_width_ == 0) {
    throw hvd::InvalidArgumentError("MaxPool2d: window " + std::to_string(kernel_) +
                                    " is larger than the " + std::to_string(height_) + "x" +
                                    std::to_string(width_) + " input.");
  }
}

void MaxPool2d::forward(std::span<const float> x, std::span<float> y, int batch) {
  check_buffer_size("MaxPool2d", "x", static_cast<int64_t>(x.size()), batch * input_size());
  check_buffer_size("MaxPool2d", "y", static_cast<int64_t>(y.size()), batch * output_size());
  batch_ = batch;
  argmax_.resize(static_cast<size_t>(batch) * output_size());
  const int k = kernel_;
  for (int n = 0; n < batch; ++n) {
    const float* xn = x.data() + n * input_size();
    float* yn = y.data() + n * output_size();
    int32_t* an = argmax_.data() + n * output_size();
    for (int c = 0; c < channels_; ++c) {
      const int plane = c * height_ * width_;
      for (int oh = 0; oh < out_height_; ++oh) {
        for (int ow = 0; ow < out_width_; ++ow) {
          int best = plane + (oh * k) * width_ + ow * k;
          for (int i = 0; i < k; ++i) {
            for (int j = 0; j < k; ++j) {
              const int idx = plane + (oh * k + i) * width_ + ow * k + j;
              if (xn[idx] > xn[best]) best = idx;
            }
          }
          const int o = (c * out_height_ + oh) * out_width_ + ow;
          yn[o] = xn[best];
          an[o] = best;
        }
      }
    }
  }
}

void MaxPool2d::backward(std::span<const float> dy, std::span<float> dx, int batch) const {
  if (batch != batch_) {
    throw hvd::InvalidArgumentError("MaxPool2d: backward for batch " + std::to_string(batch) +
                                    " after a forward for batch " + std::to_string(batch_) +
                                    "; call forward() on the same batch first.");
  }
  check_buffer_size("MaxPool2d", "dy", static_cast<int64_t>(dy.size()), batch * output_size());
  check_buffer_size("MaxPool2d", "dx", static_cast<int64_t>(dx.size()), batch * input_size());
  std::fill(dx.begin(), dx.end(), 0.0f);
  for (int n = 0; n < batch; ++n) {
    const float* dyn = dy.data() + n * output_size();
    float* dxn = dx.data() + n * input_size();
    const int32_t* an = argmax_.data() + n * output_size();
    for (int64_t o = 0; o < output_size(); ++o) dxn[an[o]] += dyn[o];
  }
}

}  // namespace train_cnn::model
