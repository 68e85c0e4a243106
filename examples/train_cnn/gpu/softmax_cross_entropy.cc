#include "gpu/softmax_cross_entropy.h"

#include <string>

#include "gpu/data_type.h"
#include "hvd/error.h"
#include "model/check.h"

namespace train_cnn::gpu {

CudnnSoftmaxCrossEntropy::CudnnSoftmaxCrossEntropy(CudaContext& context, int num_classes,
                                                   const model::Numerics* numerics)
    : context_(context), classes_(num_classes), numerics_(numerics) {
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

void CudnnSoftmaxCrossEntropy::forward(const void* logits, const int32_t* labels, int batch) {
  if (batch < 0) {
    throw hvd::InvalidArgumentError("CudnnSoftmaxCrossEntropy::forward: batch must be >= 0, got " +
                                    std::to_string(batch) + ".");
  }
  batch_ = batch;
  labels_ = labels;
  logits_ = static_cast<const float*>(logits);
  if (batch == 0) {
    // The host writes the result itself: a copy queued by an earlier forward() must land first.
    CNN_CUDA_CHECK(cudaEventSynchronize(stats_ready_));
    *host_stats_.data() = LossStats{};
    CNN_CUDA_CHECK(cudaEventRecord(stats_ready_, context_.stream()));
    return;
  }
  const size_t needed = static_cast<size_t>(batch) * classes_;
  const bool reduced = numerics_ != nullptr && numerics_->reduced();
  if (needed > log_probs_.size()) {
    context_.synchronize();  // a queued backward() may still read the old buffers
    log_probs_.resize(needed);
    if (reduced) {
      logits32_.resize(needed);
      dlogits32_.resize(needed);
    }
  }
  if (reduced) {
    // The loss runs in float32 on the 16-bit logits (exact widening).
    cast_half_to_float(logits, logits32_.data(), static_cast<int64_t>(needed),
                       half_format(numerics_->precision), context_.stream());
    logits_ = logits32_.data();
  }
  if (batch != desc_batch_) {
    set_nchw(desc_, batch, classes_, 1, 1);
    desc_batch_ = batch;
  }
  const float one = 1.0f, zero = 0.0f;
  CNN_CUDNN_CHECK(cudnnSoftmaxForward(context_.cudnn(), CUDNN_SOFTMAX_LOG,
                                      CUDNN_SOFTMAX_MODE_INSTANCE, &one, desc_.get(), logits_,
                                      &zero, desc_.get(), log_probs_.data()));
  cross_entropy_stats(logits_, log_probs_.data(), labels, batch, classes_, stats_.data(),
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

void CudnnSoftmaxCrossEntropy::backward(void* dlogits) {
  if (batch_ == 0) return;
  const int64_t n = int64_t{batch_} * classes_;
  const float scale = numerics_ != nullptr ? numerics_->loss_scale : 1.0f;
  if (numerics_ == nullptr || !numerics_->reduced()) {
    auto* d = static_cast<float*>(dlogits);
    cross_entropy_backward(log_probs_.data(), labels_, batch_, classes_, d, context_.stream());
    if (scale != 1.0f) scale_in_place(d, n, scale, context_.stream());
    return;
  }
  // The CPU emulation's order: the float gradient, times the loss scale, rounded to 16 bits.
  cross_entropy_backward(log_probs_.data(), labels_, batch_, classes_, dlogits32_.data(),
                         context_.stream());
  if (scale != 1.0f) scale_in_place(dlogits32_.data(), n, scale, context_.stream());
  cast_float_to_half(dlogits32_.data(), dlogits, n, half_format(numerics_->precision),
                     context_.stream());
}

}  // namespace train_cnn::gpu
