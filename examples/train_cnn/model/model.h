#pragma once

// The Fashion-MNIST CNN on the CPU (the graph, written once for the CPU and the GPU model, is
// model/cnn_graph.h):
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
// ModelOptions::precision bf16 or fp16 emulates mixed precision (model/precision.h): the layers
// compute with a 16-bit rounding of the float32 parameters, and activations and gradients are
// rounded to 16 bits; the parameters, the gradients handed out and the optimizer stay float32.
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

#include "model/cnn_graph.h"
#include "model/conv2d.h"
#include "model/dense.h"
#include "model/maxpool2d.h"
#include "model/precision.h"
#include "model/relu.h"
#include "model/softmax_cross_entropy.h"

namespace train_cnn::model {

// One parameter tensor: its name, PyTorch-style shape, and views into the flat vectors.
struct ParameterTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::span<float> value;
  std::span<float> gradient;
  int64_t offset = 0;  // of value (and gradient) within the flat vectors
};

// The CPU layers of the graph (model/cnn_graph.h): host vectors, spans, im2col + OpenBLAS.
// With numerics (model/precision.h) set to a 16-bit precision, the layers emulate its storage:
// conv and dense round their outputs, and in backward their input gradients and their weight and
// bias gradients; the loss multiplies its gradient by the loss scale and rounds it. ReLU and
// pooling only move values, which stay representable. numerics null, or fp32 with a loss scale
// of 1: the plain layers, bitwise.
struct CpuLayers {
  using Buffer = std::vector<float>;
  using View = std::span<float>;
  using ConstView = std::span<const float>;
  // Conv2d or model::Dense with their results rounded to the precision of *numerics.
  template <class Base>
  struct Rounded : Base {
    template <class Options>
    Rounded(const Options& o, const Numerics* numerics) : Base(o), numerics_(numerics) {}
    void bind(View weight, View bias, View weight_grad, View bias_grad) {
      Base::bind(weight, bias, weight_grad, bias_grad);
      weight_grad_ = weight_grad;
      bias_grad_ = bias_grad;
    }
    void forward(ConstView x, View y, int batch) {
      Base::forward(x, y, batch);
      round(y);
    }
    void backward(ConstView x, ConstView dy, View dx, int batch) {
      Base::backward(x, dy, dx, batch);
      round(dx);
      round(weight_grad_);
      round(bias_grad_);
    }

   private:
    void round(View v) const {
      if (numerics_) numerics_->round(v);
    }
    const Numerics* numerics_;
    View weight_grad_, bias_grad_;
  };
  using Conv = Rounded<Conv2d>;
  using Dense = Rounded<model::Dense>;
  // Softmax cross-entropy in float32; its gradient is multiplied by the loss scale, then rounded.
  struct Loss : SoftmaxCrossEntropy {
    Loss(int num_classes, const Numerics* numerics)
        : SoftmaxCrossEntropy(num_classes), numerics_(numerics) {}
    void backward(View dlogits) const {
      SoftmaxCrossEntropy::backward(dlogits);
      if (!numerics_) return;
      if (numerics_->loss_scale != 1.0f)
        for (float& v : dlogits) v *= numerics_->loss_scale;
      numerics_->round(dlogits);
    }

   private:
    const Numerics* numerics_;
  };
  // MaxPool2d remembers the winners of forward(): backward needs neither x nor y.
  struct Pool : MaxPool2d {
    using MaxPool2d::MaxPool2d;
    void backward(ConstView /*x*/, ConstView /*y*/, ConstView dy, View dx, int batch) const {
      MaxPool2d::backward(dy, dx, batch);
    }
  };
  // The element-wise functions of model/relu.h (the spans carry the batch).
  struct Relu {
    void forward(ConstView x, View y, int /*batch*/) const { relu_forward(x, y); }
    void backward(ConstView y, ConstView dy, View dx, int /*batch*/) const {
      relu_backward(y, dy, dx);
    }
  };

  Conv conv(const Conv2dOptions& o) const { return Conv(o, numerics); }
  Pool pool(const MaxPool2dOptions& o) const { return Pool(o); }
  Dense dense(const DenseOptions& o) const { return Dense(o, numerics); }
  Relu relu(int /*channels*/, int /*height*/, int /*width*/) const { return {}; }
  Loss loss(int num_classes) const { return Loss(num_classes, numerics); }
  template <class B>
  static auto view(B& buffer, size_t n) {
    return std::span(buffer.data(), n);
  }

  const Numerics* numerics = nullptr;  // the model's (null: float32)
};

class Model {
 public:
  using Evaluation = model::Evaluation;

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

  // Back-propagates the last forward()'s loss; see the class comment for on_grad_ready. With
  // ModelOptions::recompute it first re-runs the recomputed blocks' forward (model/recompute.h):
  // the same gradients, bitwise.
  void backward(const std::function<void(size_t)>& on_grad_ready = {});

  // The emulated precision (ModelOptions::precision) and the loss scale: backward() starts from
  // the loss gradient times this scale (1 unless set; loss scaling, hvd/loss_scaler.h).
  Precision precision() const { return numerics_.precision; }
  void set_loss_scale(float scale) { numerics_.loss_scale = scale; }
  float loss_scale() const { return numerics_.loss_scale; }

  // The activation memory of the last forward() and backward() as the graph counted it (bytes
  // held at most at once, held now, allocated; model/activation_ledger.h).
  ActivationMemory activation_memory() const { return graph_.activation_memory(); }

  // Mean loss and accuracy over a whole set, in chunks of batch (no gradients).
  Evaluation evaluate(std::span<const float> images, std::span<const int32_t> labels, int64_t count,
                      int batch = 256);

 private:
  ModelOptions options_;
  Numerics numerics_;          // what the layers emulate (precision, loss scale)
  CnnGraph<CpuLayers> graph_;  // the layers and their activations
  std::vector<float> params_, grads_;
  std::vector<ParameterTensor> parameters_;
  // With a 16-bit precision the layers compute with these: params_ (the float32 master weights
  // the optimizer updates) rounded by each forward().
  std::vector<float> compute_params_;
  std::vector<ParameterTensor> compute_parameters_;
};

}  // namespace train_cnn::model
