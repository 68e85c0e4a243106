#pragma once

// The Fashion-MNIST CNN on the CPU:
//   input [N, 1, 28, 28]
//   conv1 5x5, 32 channels, same padding -> ReLU -> max-pool 2x2      [N, 32, 14, 14]
//   conv2 5x5, 64 channels, same padding -> ReLU -> max-pool 2x2      [N, 64, 7, 7]
//   fc1 3136 -> hidden (default 512) -> ReLU
//   fc2 hidden -> 10 logits -> softmax cross-entropy (mean over the batch)
// (the "2 Conv+pooling" network of the dataset's benchmark table, without dropout).
//
// Parameters and gradients each live in ONE contiguous float vector (flat_parameters(),
// flat_gradients()) so the optimizer, broadcasts and checkpoints see a flat buffer; parameters()
// lists the tensors inside them in forward order:
//   0 conv1.weight [32,1,5,5]   1 conv1.bias [32]   2 conv2.weight [64,32,5,5]   3 conv2.bias [64]
//   4 fc1.weight [hidden,3136]  5 fc1.bias [hidden] 6 fc2.weight [10,hidden]     7 fc2.bias [10]
// Weight layouts match PyTorch (conv [out,in,kh,kw], dense [out,in]).
//
// A training step: zero_gradients(); forward(images, labels, batch); backward(on_grad_ready);
// then all-reduce and optimizer. backward() ADDS into the gradients (so several micro-batches can
// be accumulated) and calls on_grad_ready(i) for each parameter index i exactly once, in
// descending order (7, 6, ..., 0), right after that tensor's gradient is final for this backward
// pass: a data-parallel trainer starts the all-reduce of fc2 while conv2 and conv1 still compute.
// The callback runs on the calling thread and must not touch the gradient of a tensor it has not
// been told about yet.
//
// Deterministic: for a given build and CPU, the same parameters and batch give bitwise the same
// logits, loss and gradients (OpenBLAS runs on ModelOptions::blas_threads threads, default 1; see
// model/gemm.h). A sample's logits do not depend on the rest of its batch. Not thread-safe: one
// model per thread.

#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include "model/conv2d.h"
#include "model/dense.h"
#include "model/maxpool2d.h"
#include "model/softmax_cross_entropy.h"

namespace train_cnn::model {

struct ModelOptions {
  int in_channels = 1;
  int height = 28;
  int width = 28;
  int conv1_channels = 32;
  int conv2_channels = 64;
  int kernel = 5;  // odd: same padding
  int hidden = 512;
  int num_classes = 10;
  int blas_threads = 1;  // applied to OpenBLAS by the constructor; 0 leaves it as it is
};

// One parameter tensor: its name, PyTorch-style shape, and views into the flat vectors.
struct ParameterTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::span<float> value;
  std::span<float> gradient;
  int64_t offset = 0;  // of value (and gradient) within the flat vectors
};

class Model {
 public:
  explicit Model(const ModelOptions& options = {});
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  const ModelOptions& options() const { return options_; }
  int64_t input_size() const;  // floats per image (C*H*W)
  int num_classes() const { return options_.num_classes; }

  // Fills the parameters from seed: He normal for conv1, conv2, fc1 (followed by ReLU), Glorot
  // uniform for fc2, zero biases; one InitRng (model/init.h) drawn in parameters() order. Same
  // seed -> bitwise same parameters on every rank.
  void initialize(uint64_t seed);

  std::vector<ParameterTensor>& parameters() { return parameters_; }
  const std::vector<ParameterTensor>& parameters() const { return parameters_; }
  std::span<float> flat_parameters() { return params_; }
  std::span<const float> flat_parameters() const { return params_; }
  std::span<float> flat_gradients() { return grads_; }
  std::span<const float> flat_gradients() const { return grads_; }
  int64_t num_parameters() const { return static_cast<int64_t>(params_.size()); }

  void zero_gradients();

  // images [batch, C, H, W] (copied), labels [batch]. Keeps what backward() needs. batch may be 0.
  LossResult forward(std::span<const float> images, std::span<const int32_t> labels, int batch);

  // Logits of the last forward(), [batch, num_classes].
  std::span<const float> logits() const;

  // Back-propagates the last forward()'s loss; see the class comment for on_grad_ready.
  void backward(const std::function<void(size_t)>& on_grad_ready = {});

  // Mean loss and accuracy over a whole set, in chunks of batch (no gradients).
  struct Evaluation {
    double loss = 0.0;
    double accuracy = 0.0;
    int64_t count = 0;
  };
  Evaluation evaluate(std::span<const float> images, std::span<const int32_t> labels, int64_t count,
                      int batch = 256);

 private:
  void resize_activations(int batch);

  ModelOptions options_;
  Conv2d conv1_;
  MaxPool2d pool1_;
  Conv2d conv2_;
  MaxPool2d pool2_;
  Dense fc1_, fc2_;
  SoftmaxCrossEntropy loss_;

  std::vector<float> params_, grads_;
  std::vector<ParameterTensor> parameters_;

  int batch_ = -1;  // of the last forward(); -1 before the first
  // Activations of the last forward (ReLU applied in place on a1, a2, h).
  std::vector<float> input_, a1_, p1_, a2_, p2_, h_, logits_;
  // Gradient scratch.
  std::vector<float> d_logits_, d_h_, d_p2_, d_a2_, d_p1_, d_a1_;
};

}  // namespace train_cnn::model
