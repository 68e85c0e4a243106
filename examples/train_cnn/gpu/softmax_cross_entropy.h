#pragma once

// Softmax cross-entropy on the GPU: the loss of model/softmax_cross_entropy.h,
//   L = -(1/N) sum_n log softmax(z_n)[label_n],   dL/dz = (softmax(z) - onehot(label)) / N.
// cudnnSoftmaxForward(CUDNN_SOFTMAX_LOG, MODE_INSTANCE) computes log softmax (stable: the row
// maximum is subtracted); one single-block kernel sums the loss (in double), counts the correct
// predictions (first arg-max, as the CPU) and finds the first invalid label, in a fixed order;
// another writes the gradient.
//
// Asynchronous: forward() only queues work; result() waits for it and returns the LossResult,
// throwing hvd::InvalidArgumentError (sample and label, as the CPU layer) when a label was out of
// range. Labels are int32 in device memory. Device pointers; queued on the context's stream.

#include <cstdint>

#include "gpu/context.h"
#include "gpu/device_buffer.h"
#include "gpu/kernels.h"
#include "model/softmax_cross_entropy.h"

namespace train_cnn::gpu {

class CudnnSoftmaxCrossEntropy {
 public:
  CudnnSoftmaxCrossEntropy(CudaContext& context, int num_classes);
  ~CudnnSoftmaxCrossEntropy();
  CudnnSoftmaxCrossEntropy(const CudnnSoftmaxCrossEntropy&) = delete;
  CudnnSoftmaxCrossEntropy& operator=(const CudnnSoftmaxCrossEntropy&) = delete;

  int num_classes() const { return classes_; }

  // logits [batch, classes] and labels [batch] must stay unchanged until backward().
  void forward(const float* logits, const int32_t* labels, int batch);
  // Waits for the last forward() and returns its mean loss and correct count.
  model::LossResult result();
  // WRITES dL/dlogits for the last forward().
  void backward(float* dlogits);

 private:
  CudaContext& context_;
  int classes_;
  int batch_ = 0;
  const int32_t* labels_ = nullptr;
  TensorDescriptor desc_;
  int desc_batch_ = -1;
  DeviceArray<float> log_probs_;
  DeviceArray<LossStats> stats_;
  PinnedArray<LossStats> host_stats_;
  cudaEvent_t stats_ready_ = nullptr;
};

}  // namespace train_cnn::gpu
