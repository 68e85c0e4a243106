#include "model/conv2d.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "hvd/error.h"
#include "model/check.h"
#include "model/gemm.h"

namespace train_cnn::model {

Conv2d::Conv2d(const Conv2dOptions& o)
    : in_channels_(o.in_channels),
      out_channels_(o.out_channels),
      kernel_(o.kernel),
      height_(o.height),
      width_(o.width),
      padding_(o.padding) {
  check_positive("Conv2d", "in_channels", in_channels_);
  check_positive("Conv2d", "out_channels", out_channels_);
  check_positive("Conv2d", "kernel", kernel_);
  check_positive("Conv2d", "height", height_);
  check_positive("Conv2d", "width", width_);
  if (padding_ < 0) {
    if (kernel_ % 2 == 0) {
      throw hvd::InvalidArgumentError("Conv2d: 'same' padding needs an odd kernel, got kernel " +
                                      std::to_string(kernel_) + "; pass an explicit padding.");
    }
    padding_ = kernel_ / 2;
  }
  out_height_ = height_ + 2 * padding_ - kernel_ + 1;
  out_width_ = width_ + 2 * padding_ - kernel_ + 1;
  if (out_height_ <= 0 || out_width_ <= 0) {
    throw hvd::InvalidArgumentError(
        "Conv2d: kernel " + std::to_string(kernel_) + " with padding " + std::to_string(padding_) +
        " does not fit the " + std::to_string(height_) + "x" + std::to_string(width_) + " input.");
  }
  col_.resize(static_cast<size_t>(fan_in()) * out_height_ * out_width_);
}

void Conv2d::bind(std::span<float> weight, std::span<float> bias, std::span<float> weight_grad,
                  std::span<float> bias_grad) {
  check_buffer_size("Conv2d", "weight", static_cast<int64_t>(weight.size()), weight_size());
  check_buffer_size("Conv2d", "bias", static_cast<int64_t>(bias.size()), bias_size());
  check_buffer_size("Conv2d", "weight_grad", static_cast<int64_t>(weight_grad.size()),
                    weight_size());
  check_buffer_size("Conv2d", "bias_grad", static_cast<int64_t>(bias_grad.size()), bias_size());
  weight_ = weight;
  bias_ = bias;
  weight_grad_ = weight_grad;
  bias_grad_ = bias_grad;
}

// col[(c*K + ki)*K + kj, oh*OW + ow] = x[c, oh + ki - P, ow + kj - P], zero outside the image.
// Stride 1 makes each (row, ki, kj) a contiguous run of valid columns, copied with memcpy.
void Conv2d::im2col(const float* x, float* col) const {
  const int k = kernel_, p = padding_, oh_n = out_height_, ow_n = out_width_;
  for (int c = 0; c < in_channels_; ++c) {
    const float* xc = x + static_cast<size_t>(c) * height_ * width_;
    for (int ki = 0; ki < k; ++ki) {
      for (int kj = 0; kj < k; ++kj) {
        float* row = col + (static_cast<size_t>(c) * k * k + ki * k + kj) * oh_n * ow_n;
        const int ow_lo = std::max(0, p - kj);
        const int ow_hi = std::min(ow_n, width_ + p - kj);  // exclusive
        for (int oh = 0; oh < oh_n; ++oh) {
          float* out = row + static_cast<size_t>(oh) * ow_n;
          const int ih = oh + ki - p;
          if (ih < 0 || ih >= height_ || ow_lo >= ow_hi) {
            std::memset(out, 0, sizeof(float) * ow_n);
            continue;
          }
          std::fill(out, out + ow_lo, 0.0f);
          std::memcpy(out + ow_lo, xc + static_cast<size_t>(ih) * width_ + (ow_lo + kj - p),
                      sizeof(float) * (ow_hi - ow_lo));
          std::fill(out + ow_hi, out + ow_n, 0.0f);
        }
      }
    }
  }
}

// The adjoint of im2col: x (zeroed by the caller) += every column entry at the position it was
// read from. The loop order is fixed, so the additions happen in the same order every time.
void Conv2d::col2im(const float* col, float* x) const {
  const int k = kernel_, p = padding_, oh_n = out_height_, ow_n = out_width_;
  for (int c = 0; c < in_channels_; ++c) {
    float* xc = x + static_cast<size_t>(c) * height_ * width_;
    for (int ki = 0; ki < k; ++ki) {
      for (int kj = 0; kj < k; ++kj) {
        const float* row = col + (static_cast<size_t>(c) * k * k + ki * k + kj) * oh_n * ow_n;
        const int ow_lo = std::max(0, p - kj);
        const int ow_hi = std::min(ow_n, width_ + p - kj);
        for (int oh = 0; oh < oh_n; ++oh) {
          const int ih = oh + ki - p;
          if (ih < 0 || ih >= height_) continue;
          const float* in = row + static_cast<size_t>(oh) * ow_n;
          float* dst = xc + static_cast<size_t>(ih) * width_;
          for (int ow = ow_lo; ow < ow_hi; ++ow) dst[ow + kj - p] += in[ow];
        }
      }
    }
  }
}

void Conv2d::forward(std::span<const float> x, std::span<float> y, int batch) {
  check_buffer_size("Conv2d", "x", static_cast<int64_t>(x.size()), batch * input_size());
  check_buffer_size("Conv2d", "y", static_cast<int64_t>(y.size()), batch * output_size());
  const int spatial = out_height_ * out_width_;
  for (int n = 0; n < batch; ++n) {
    const float* xn = x.data() + n * input_size();
    float* yn = y.data() + n * output_size();
    for (int oc = 0; oc < out_channels_; ++oc) {
      std::fill(yn + static_cast<size_t>(oc) * spatial, yn + static_cast<size_t>(oc + 1) * spatial,
                bias_[oc]);
    }
    im2col(xn, col_.data());
    gemm(Trans::kNo, Trans::kNo, out_channels_, spatial, fan_in(), 1.0f, weight_.data(),
         col_.data(), 1.0f, yn);
  }
}

void Conv2d::backward(std::span<const float> x, std::span<const float> dy, std::span<float> dx,
                      int batch) {
  check_buffer_size("Conv2d", "x", static_cast<int64_t>(x.size()), batch * input_size());
  check_buffer_size("Conv2d", "dy", static_cast<int64_t>(dy.size()), batch * output_size());
  if (!dx.empty()) {
    check_buffer_size("Conv2d", "dx", static_cast<int64_t>(dx.size()), batch * input_size());
  }
  const int spatial = out_height_ * out_width_;
  for (int n = 0; n < batch; ++n) {
    const float* xn = x.data() + n * input_size();
    const float* dyn = dy.data() + n * output_size();
    for (int oc = 0; oc < out_channels_; ++oc) {
      const float* r = dyn + static_cast<size_t>(oc) * spatial;
      float s = 0.0f;
      for (int i = 0; i < spatial; ++i) s += r[i];
      bias_grad_[oc] += s;
    }
    im2col(xn, col_.data());
    // dW[OC, CKK] += dy[OC, S] * col[CKK, S]^T
    gemm(Trans::kNo, Trans::kYes, out_channels_, fan_in(), spatial, 1.0f, dyn, col_.data(), 1.0f,
         weight_grad_.data());
    if (!dx.empty()) {
      // dcol[CKK, S] = W[OC, CKK]^T * dy[OC, S], then scattered back onto dx.
      gemm(Trans::kYes, Trans::kNo, fan_in(), spatial, out_channels_, 1.0f, weight_.data(), dyn,
           0.0f, col_.data());
      float* dxn = dx.data() + n * input_size();
      std::fill(dxn, dxn + input_size(), 0.0f);
      col2im(col_.data(), dxn);
    }
  }
}

}  // namespace train_cnn::model
