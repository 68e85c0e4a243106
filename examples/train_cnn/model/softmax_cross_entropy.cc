#include "model/softmax_cross_entropy.h"

#include <cmath>
#include <string>

#include "hvd/error.h"
#include "model/check.h"

namespace train_cnn::model {

SoftmaxCrossEntropy::SoftmaxCrossEntropy(int num_classes) : classes_(num_classes) {
  check_positive("SoftmaxCrossEntropy", "num_classes", classes_);
}

LossResult SoftmaxCrossEntropy::forward(std::span<const float> logits,
                                        std::span<const int32_t> labels, int batch) {
  check_buffer_size("SoftmaxCrossEntropy", "logits", static_cast<int64_t>(logits.size()),
                    int64_t{batch} * classes_);
  if (static_cast<int64_t>(labels.size()) != batch) {
    throw hvd::InvalidArgumentError("SoftmaxCrossEntropy: " + std::to_string(labels.size()) +
                                    " labels for a batch of " + std::to_string(batch) + ".");
  }
  for (int n = 0; n < batch; ++n) {
    if (labels[n] < 0 || labels[n] >= classes_) {
      throw hvd::InvalidArgumentError("SoftmaxCrossEntropy: sample " + std::to_string(n) +
                                      " has label " + std::to_string(labels[n]) + ", expected 0.." +
                                      std::to_string(classes_ - 1) + ".");
    }
  }
  batch_ = batch;
  probs_.resize(static_cast<size_t>(batch) * classes_);
  labels_.assign(labels.begin(), labels.end());
  LossResult result;
  double total = 0.0;
  for (int n = 0; n < batch; ++n) {
    const float* z = logits.data() + static_cast<size_t>(n) * classes_;
    float* p = probs_.data() + static_cast<size_t>(n) * classes_;
    int best = 0;
    for (int c = 1; c < classes_; ++c) {
      if (z[c] > z[best]) best = c;
    }
    const double zmax = z[best];
    double sum = 0.0;
    for (int c = 0; c < classes_; ++c) sum += std::exp(static_cast<double>(z[c]) - zmax);
    const double log_sum = std::log(sum);
    for (int c = 0; c < classes_; ++c) {
      p[c] = static_cast<float>(std::exp(static_cast<double>(z[c]) - zmax - log_sum));
    }
    total += log_sum + zmax - static_cast<double>(z[labels[n]]);
    if (best == labels[n]) ++result.correct;
  }
  result.loss = batch > 0 ? total / batch : 0.0;
  return result;
}

void SoftmaxCrossEntropy::backward(std::span<float> dlogits) const {
  check_buffer_size("SoftmaxCrossEntropy", "dlogits", static_cast<int64_t>(dlogits.size()),
                    int64_t{batch_} * classes_);
  if (batch_ == 0) return;
  const float scale = 1.0f / static_cast<float>(batch_);
  for (int n = 0; n < batch_; ++n) {
    const float* p = probs_.data() + static_cast<size_t>(n) * classes_;
    float* d = dlogits.data() + static_cast<size_t>(n) * classes_;
    for (int c = 0; c < classes_; ++c) d[c] = p[c] * scale;
    d[labels_[n]] -= scale;
  }
}

}  // namespace train_cnn::model
