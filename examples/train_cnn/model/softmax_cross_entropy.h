#pragma once

// Softmax followed by cross-entropy against integer labels, averaged over the batch:
//   L = -(1/N) * sum_n log softmax(z_n)[label_n]
// computed stably (the row maximum is subtracted before exp; the log-sum-exp is accumulated in
// double). backward() writes dL/dz = (softmax(z) - onehot(label)) / N.
//
// The 1/N uses the batch given to forward(): with data parallelism each replica averages over its
// own batch and the all-reduce averages over replicas, which equals the mean over the global batch
// when every replica has the same batch size.

#include <cstdint>
#include <span>
#include <vector>

namespace train_cnn::model {

struct LossResult {
  double loss = 0.0;    // mean cross-entropy over the batch (0 for an empty batch)
  int64_t correct = 0;  // samples whose arg-max logit (first one on ties) equals the label
};

class SoftmaxCrossEntropy {
 public:
  explicit SoftmaxCrossEntropy(int num_classes);

  int num_classes() const { return classes_; }

  // logits [batch, classes]; labels in [0, classes) or an hvd::InvalidArgumentError naming the
  // sample and the label.
  LossResult forward(std::span<const float> logits, std::span<const int32_t> labels, int batch);

  // WRITES dL/dlogits for the last forward().
  void backward(std::span<float> dlogits) const;

 private:
  int classes_;
  int batch_ = 0;
  std::vector<float> probs_;
  std::vector<int32_t> labels_;
};

}  // namespace train_cnn::model
