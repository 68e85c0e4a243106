#include "gpu/softmax_cross_entropy.h"

#include <string>

#include "hvd/error.h"
#include "model/check.h"

namespace train_cnn::gpu {

CudnnSoftmaxCrossEntropy::CudnnSoftmaxCrossEntropy(CudaContext& context, int num_classes)
    : context_(context), classes_(num_classes) {
  model::check_positive("CudnnSoftmaxCrossEntropy", "num_classes", classes_);
  context_.activate();
  stats_.resize(1);
  host_stats_.reserve(1);
  *host_stats_.data() = LossStats{};
  CNN_CUDA_CHECK(cudaEventCreateWithFlags(&stats_ready_, cudaEventDisableTiming));
}

CudnnSoftmaxCrossEntropy::~CudnnSoftmaxCrossEntropy() {
  if (stats_ready_ != nullptr) cudaEventDestroy(stats_ready_);
}

void CudnnSoftmaxCrossEntropy::forward(const float* logits, const int32_t* labels, int batch) {
  if (batch < 0) {
    throw hvd::InvalidArgumentError("CudnnSoftmaxCrossEntropy::forward: batch must be >= 0, got " +
                                    std::to_string(batch) + ".");
  }
  batch_ = batch;
  labels_ = labels;
  if (batch == 0) {
    // The host writes the result itself: a copy queued by an earlier forward() must land first.
    CNN_CUDA_CHECK(cudaEventSynchronize(stats_ready_));
    *host_stats_.data() = LossStats{};
    CNN_CUDA_CHECK(cudaEventRecord(stats_ready_, context_.stream()));
    return;
  }
  const size_t needed = static_cast<size_t>(batch) * classes_;
  if (needed > log_probs_.size()) {
    context_.synchronize();  // a queued backward() may still read the old buffer
    log_probs_.resize(needed);
  }
  if (batch != desc_batch_) {
    set_nchw(desc_, batch, classes_, 1, 1);
    desc_batch_ = batch;
  }
  const float one = 1.0f, zero = 0.0f;
  CNN_CUDNN_CHECK(cudnnSoftmaxForward(context_.cudnn(), CUDNN_SOFTMAX_LOG,
                                      CUDNN_SOFTMAX_MODE_INSTANCE, &one, desc_.get(), logits, &zero,
                                      desc_.get(), log_probs_.data()));
  cross_entropy_stats(logits, log_probs_.data(), labels, batch, classes_, stats_.data(),
                      context_.stream());
  CNN_CUDA_CHECK(cudaMemcpyAsync(host_stats_.data(), stats_.data(), sizeof(LossStats),
                                 cudaMemcpyDeviceToHost, context_.stream()));
  CNN_CUDA_CHECK(cudaEventRecord(stats_ready_, context_.stream()));
}

model::LossResult CudnnSoftmaxCrossEntropy::result() {
  CNN_CUDA_CHECK(cudaEventSynchronize(stats_ready_));
  const LossStats s = *host_stats_.data();
  if (s.bad_sample >= 0) {
    throw hvd::InvalidArgumentError("SoftmaxCrossEntropy: sample " + std::to_string(s.bad_sample) +
                                    " has label " + std::to_string(s.bad_label) + ", expected 0.." +
                                    std::to_string(classes_ - 1) + ".");
  }
  model::LossResult r;
  r.correct = s.correct;
  r.loss = batch_ > 0 ? s.loss_sum / batch_ : 0.0;
  return r;
}

void CudnnSoftmaxCrossEntropy::backward(float* dlogits) {
  if (batch_ == 0) return;
  cross_entropy_backward(log_probs_.data(), labels_, batch_, classes_, dlogits, context_.stream());
}

}  // namespace train_cnn::gpu
