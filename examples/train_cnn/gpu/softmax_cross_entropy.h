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
//
// Mixed precision (numerics, model/precision.h, owned by the model): with bf16 / fp16 the logits
// and their gradient are 16-bit values; the loss runs in float32 all the same, as the CPU
// emulation does: forward() widens the logits to float (exact), backward() computes the float
// gradient, multiplies it by numerics->loss_scale (read at each backward(): the loss scale of the
// step; exact for powers of two) and rounds it to 16 bits. With float32 logits a loss scale other
// than 1 multiplies the float gradient; scale 1 (or no numerics) is the plain layer.

#include <cstdint>

#include "gpu/context.h"
#include "gpu/device_buffer.h"
#include "gpu/kernels.h"
#include "model/precision.h"
#include "model/softmax_cross_entropy.h"

namespace train_cnn::gpu {

class CudnnSoftmaxCrossEntropy {
 public:
  CudnnSoftmaxCrossEntropy(CudaContext& context, int num_classes,
                           const model::Numerics* numerics = nullptr);
  ~CudnnSoftmaxCrossEntropy();
  CudnnSoftmaxCrossEntropy(const CudnnSoftmaxCrossEntropy&) = delete;
  CudnnSoftmaxCrossEntropy& operator=(const CudnnSoftmaxCrossEntropy&) = delete;

  int num_classes() const { return classes_; }

  // logits [batch, classes] (the precision's storage type) and labels [batch] must stay unchanged
  // until backward().
  void forward(const void* logits, const int32_t* labels, int batch);
  // Waits for the last forward() and returns its mean loss and correct count.
  model::LossResult result();
  // WRITES dL/dlogits (times the loss scale) for the last forward(), in the storage type.
  void backward(void* dlogits);
  // The last forward()'s logits as float32 (with 16-bit logits: their exact widening, kept here);
  // [batch, classes] on the device, valid until the next forward().
  const float* float_logits() const { return logits_; }

 private:
  CudaContext& context_;
  int classes_;
  const model::Numerics* numerics_;
  int batch_ = 0;
  const int32_t* labels_ = nullptr;
  const float* logits_ = nullptr;  // the last forward()'s float32 logits
  DeviceArray<float> logits32_;    // 16-bit logits widened (bf16 / fp16 only)
  DeviceArray<float> dlogits32_;   // the float gradient before its rounding (bf16 / fp16 only)
  TensorDescriptor desc_;
  int desc_batch_ = -1;
  DeviceArray<float> log_probs_;
  DeviceArray<LossStats> stats_;
  PinnedArray<LossStats> host_stats_;
  cudaEvent_t stats_ready_ = nullptr;
};

}  // namespace train_cnn::gpu
