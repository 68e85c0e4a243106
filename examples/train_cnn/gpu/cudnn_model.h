#pragma once

// The Fashion-MNIST CNN of model/model.h on one GPU (the graph, shared with the CPU model, is
// model/cnn_graph.h): cuDNN convolution, pooling, activation and softmax, cuBLAS dense layers, a
// few kernels of our own (bias, loss statistics, SGD). The same network, the same ModelOptions, the
// same parameter order, names, shapes and flat layout, the same initialisation (drawn on the host
// by the CPU model's code and copied), the same on_grad_ready contract. What differs: parameters,
// gradients and activations live in device memory, and the work is asynchronous on stream().
//
//   0 conv1.weight [32,1,5,5]   1 conv1.bias [32]   2 conv2.weight [64,32,5,5]   3 conv2.bias [64]
//   4 fc1.weight [hidden,3136]  5 fc1.bias [hidden] 6 fc2.weight [10,hidden]     7 fc2.bias [10]
//
// A training step (data parallel, gradients all-reduced on the device):
//   net.zero_gradients();
//   net.enqueue_forward(images, labels, batch);      // host data: staged through pinned memory
//   net.backward([&](size_t i) {                     // 7, 6, ..., 0, each once
//     auto& p = net.parameters()[i];                 // p.gradient: device pointer, final in
//     // stream order: hvd::TensorRef over p.gradient, Device::cuda(net.device()), net.stream()
//   });
//   // wait for the all-reduces, then
//   opt.step(net.flat_parameters(), net.flat_gradients(), lr);   // gpu::SgdMomentum, on device
//   auto [loss, correct] = net.last_loss();          // waits for the forward pass only
//
// Ordering and lifetime: every call queues work on stream() in program order and returns without
// waiting, except forward(), last_loss(), evaluate() and the copies to and from the host, which
// wait for the stream. on_grad_ready(i) is called on the calling thread once the kernels producing
// gradient i are QUEUED: the gradient is final in stream order, not yet on the host. Device input
// (enqueue_forward_device) is used in place and must stay unchanged until backward() has been
// queued and the stream has passed it.
//
// Deterministic algorithms only (fixed reduction orders, deterministic cuDNN algorithms): the same
// build, GPU, parameters and batch give bitwise the same loss and gradients. With FP32 math (the
// default) results agree with the CPU model to about 1e-5 relative; with GpuOptions::allow_tf32
// to about 1e-3. Not thread-safe: one model per thread.
//
// Mixed precision (ModelOptions::precision bf16 or fp16; the CPU model emulates the same storage,
// model/precision.h): the parameters (fp32 master weights), the gradients handed out
// (flat_gradients(), parameters()[i].gradient) and the optimizer stay float32. Each forward pass
// casts the master weights to a 16-bit compute copy and the input images to 16 bits; activations,
// activation gradients and the weight and bias gradients are 16-bit, the layers compute in float
// on tensor cores (gpu/data_type.h); the loss runs in float32 on the widened logits and its
// gradient is multiplied by the loss scale (set_loss_scale) before it is rounded to 16 bits. As
// backward() finishes gradient i, it widens the 16-bit gradient into the float32 gradient i
// (exact), before on_grad_ready(i). The activation buffers hold 2 bytes per value.

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "gpu/context.h"
#include "gpu/conv2d.h"
#include "gpu/data_type.h"
#include "gpu/dense.h"
#include "gpu/device_buffer.h"
#include "gpu/maxpool2d.h"
#include "gpu/relu.h"
#include "gpu/softmax_cross_entropy.h"
#include "model/cnn_graph.h"
#include "model/model.h"

namespace train_cnn::gpu {

// One parameter tensor: name and shape as model::ParameterTensor, device pointers into the flat
// device vectors.
struct GpuParameterTensor {
  std::string name;
  std::vector<int64_t> shape;
  float* value = nullptr;
  float* gradient = nullptr;
  int64_t offset = 0;  // within the flat vectors (floats)
  int64_t size = 0;    // floats
};

// The GPU layers of the graph (model/cnn_graph.h): device arrays and pointers, cuDNN and cuBLAS,
// all on one context's stream. The views are untyped: the values are float32, or 16-bit with a
// bf16 / fp16 model (numerics->precision, fixed at construction; value_bytes() per value).
struct CudnnLayers {
  using Buffer = DeviceArray<float>;  // sized in floats by the graph (2-byte values: half as many)
  using View = void*;
  using ConstView = const void*;
  using Conv = CudnnConv2d;
  using Pool = CudnnMaxPool2d;
  using Dense = CublasDense;
  using Relu = CudnnRelu;
  using Loss = CudnnSoftmaxCrossEntropy;

  CudaContext& context;
  const model::Numerics* numerics;  // the model's: precision and loss scale

  model::Precision precision() const { return numerics->precision; }
  size_t value_bytes() const { return gpu::value_bytes(precision()); }
  Conv conv(const model::Conv2dOptions& o) const { return Conv(context, o, precision()); }
  Pool pool(const model::MaxPool2dOptions& o) const { return Pool(context, o, precision()); }
  Dense dense(const model::DenseOptions& o) const { return Dense(context, o, precision()); }
  Relu relu(int channels, int height, int width) const {
    return Relu(context, channels, height, width, precision());
  }
  Loss loss(int num_classes) const { return Loss(context, num_classes, numerics); }
  template <class B>
  static auto view(B& buffer, size_t /*n*/) {
    return buffer.data();
  }
};

class CudnnModel {
 public:
  explicit CudnnModel(const model::ModelOptions& options = {}, const GpuOptions& gpu = {});
  ~CudnnModel();
  CudnnModel(const CudnnModel&) = delete;
  CudnnModel& operator=(const CudnnModel&) = delete;

  const model::ModelOptions& options() const { return options_; }
  const GpuOptions& gpu_options() const { return context_.options(); }
  int device() const { return context_.device(); }
  cudaStream_t stream() const { return context_.stream(); }
  CudaContext& context() { return context_; }
  int64_t input_size() const { return graph_.input_size(); }
  int num_classes() const { return options_.num_classes; }

  // The CPU model's initialisation for this seed (model::Model::initialize), copied to the device.
  void initialize(uint64_t seed);

  // ModelOptions::precision; the loss scale the next backward() multiplies the loss gradient by
  // (1 unless set; loss scaling, hvd/loss_scaler.h), in any precision.
  model::Precision precision() const { return numerics_.precision; }
  void set_loss_scale(float scale) { numerics_.loss_scale = scale; }
  float loss_scale() const { return numerics_.loss_scale; }

  const std::vector<GpuParameterTensor>& parameters() const { return parameters_; }
  float* flat_parameters() { return params_.data(); }
  float* flat_gradients() { return grads_.data(); }
  int64_t num_parameters() const { return num_parameters_; }

  void zero_gradients();

  // images [batch, C, H, W] and labels [batch] on the host (checked as on the CPU); waits for the
  // loss. batch may be 0.
  model::LossResult forward(std::span<const float> images, std::span<const int32_t> labels,
                            int batch);
  // The same without waiting: the host buffers may be reused when this returns.
  void enqueue_forward(std::span<const float> images, std::span<const int32_t> labels, int batch);
  // The same from device memory (labels int32; an invalid label is reported by last_loss()).
  void enqueue_forward_device(const float* images, const int32_t* labels, int batch);
  // Waits for the last forward pass and returns its loss and correct count.
  model::LossResult last_loss();

  // Back-propagates the last forward pass; see the file comment for on_grad_ready. With
  // ModelOptions::recompute it first re-runs the recomputed blocks' forward (model/recompute.h).
  // bf16 / fp16: gradient i is widened from its 16-bit copy before on_grad_ready(i).
  void backward(const std::function<void(size_t)>& on_grad_ready = {});

  // Device bytes of activations, counted by the graph as it queues the work (held at most at once
  // in the last step, held now, allocated; model/activation_ledger.h).
  model::ActivationMemory activation_memory() const { return graph_.activation_memory(); }

  // Mean loss and accuracy over a host data set, in chunks of batch (no gradients).
  model::Evaluation evaluate(std::span<const float> images, std::span<const int32_t> labels,
                             int64_t count, int batch = 256);

  // Copies between the flat device vectors and host vectors of num_parameters() floats (for
  // broadcasts from rank 0, checkpoints and tests); they wait for the stream.
  void copy_parameters_to_host(std::span<float> out);
  void copy_parameters_from_host(std::span<const float> in);
  void copy_gradients_to_host(std::span<float> out);
  // Logits of the last forward pass, [batch, num_classes], copied to the host (bf16 / fp16: the
  // 16-bit logits, widened).
  std::vector<float> logits_to_host();

 private:
  void reserve_activations(int batch);
  // bf16 / fp16, before a forward pass: the master weights to their 16-bit compute copy, and the
  // float32 device images [batch, C, H, W] to the graph's 16-bit input, which is returned.
  const void* prepare_reduced_forward(const float* images, int batch);

  model::ModelOptions options_;
  std::unique_ptr<model::Model> host_model_;  // layout and initialisation, on the host
  CudaContext context_;
  model::Numerics numerics_;            // precision and loss scale, read by the layers
  model::CnnGraph<CudnnLayers> graph_;  // the layers and their activations

  int64_t num_parameters_ = 0;
  DeviceArray<float> params_, grads_;
  std::vector<GpuParameterTensor> parameters_;
  // bf16 / fp16 only: the 16-bit compute copy of params_ and the 16-bit gradients the layers
  // accumulate into (the same flat layout), and the float32 input staged before its cast.
  DeviceArray<uint16_t> compute_params_, compute_grads_;
  DeviceArray<float> input32_;

  DeviceArray<int32_t> labels_;  // [capacity]: enqueue_forward's labels
  // Host staging of enqueue_forward: pinned, reused once the previous copy has landed.
  PinnedArray<float> staged_images_;
  PinnedArray<int32_t> staged_labels_;
  cudaEvent_t staged_copied_ = nullptr;
};

}  // namespace train_cnn::gpu
