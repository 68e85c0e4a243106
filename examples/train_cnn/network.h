#pragma once

// The seam between the trainer and the device the model runs on.
//
// Network is what the trainer sees of one replica: a model plus its SGD-with-momentum optimizer on
// one device. The trainer never looks inside; it feeds host batches, hands each gradient to the
// strategy as the backward pass finishes it, and steps the optimizer. Both replicas are one
// NetworkAdapter (network_adapter.h): over model::Model and model::SgdMomentum (OpenBLAS) on the
// CPU, over train_cnn::gpu::CudnnModel and gpu::SgdMomentum on a GPU (see make_network() in
// network.cc). On the GPU, gradient() refs point to device memory with the stream they are
// produced on, and state() lives in host mirrors that state_to_host()/state_from_host()
// synchronise.
//
// Not thread-safe: one Network per training thread.

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/batch_memory.h"
#include "hvd/checkpoint.h"
#include "hvd/loss_scaler.h"
#include "hvd/tensor.h"
#include "model/model.h"

namespace train_cnn {

enum class DeviceKind { kCpu, kCuda };

// Where this rank's replica runs.
struct DeviceChoice {
  DeviceKind kind = DeviceKind::kCpu;
  int index = 0;            // CUDA device (local rank modulo the visible devices)
  std::string description;  // e.g. "cpu (OpenBLAS, 1 thread)"
};

// Resolves --device (auto|cpu|cuda) for the rank with this local rank: auto is cuda when this
// build has the cuDNN model and a CUDA device is visible, else cpu; cuda when either is missing is
// an hvd::InvalidArgumentError that says which and how to fix it.
DeviceChoice resolve_device(const std::string& requested, int local_rank);

struct NetworkOptions {
  model::ModelOptions model;
  float momentum = 0.9f;
  float weight_decay = 0.0f;
  // The dtype the trainer's strategy all-reduces the gradients in (StrategyOptions::gradient_dtype,
  // --gradient-allreduce). The CPU network ignores it (the strategy rounds host gradients itself);
  // the GPU network, whose gradients are on the device where the strategy cannot round them, hands
  // out 16-bit device copies of its float32 gradients instead (gradient(i)) and widens them back in
  // gradients_reduced().
  hvd::DataType gradient_dtype = hvd::DataType::kFloat32;
};

class Network {
 public:
  virtual ~Network() = default;

  virtual std::string description() const = 0;
  virtual int64_t num_parameters() const = 0;
  // Parameter tensor names in forward order (conv1.weight, ..., fc2.bias).
  virtual std::vector<std::string> parameter_names() const = 0;

  // Same seed -> same parameters on every rank.
  virtual void initialize(uint64_t seed) = 0;
  // Mixed precision (--precision, model/precision.h): the next backward() starts from the
  // gradient of loss x scale. A network without loss scaling throws hvd::InvalidArgumentError for a
  // scale other than 1 (both of train_cnn's networks have it).
  virtual void set_loss_scale(float scale) = 0;

  // One training step: zero_gradients(); forward(host batch); backward(on_grad_ready) calls
  // on_grad_ready(i) once per parameter, last layer first, when gradient(i) is final; after the
  // gradients are averaged, optimizer_step(lr).
  virtual void zero_gradients() = 0;
  virtual model::LossResult forward(std::span<const float> images, std::span<const int32_t> labels,
                                    int batch) = 0;
  virtual void backward(const std::function<void(size_t)>& on_grad_ready) = 0;
  virtual hvd::TensorRef gradient(size_t i) = 0;
  // After the strategy's synchronize_gradients(), before the gradients are read: the GPU network
  // widens gradients all-reduced in 16 bits (NetworkOptions::gradient_dtype) back into its float32
  // gradients. Nothing on the CPU.
  virtual void gradients_reduced() {}
  // Mixed precision, after gradients_reduced(): multiplies every float32 gradient by
  // 1 / scaler.scale() in place and returns true when any of them is Inf or NaN on this replica
  // (local; the caller's scaler.update() agrees across ranks). The CPU network passes its host
  // gradients to scaler.unscale(); the GPU network unscales and checks on its device.
  virtual bool unscale_gradients(const hvd::LossScaler& scaler);
  virtual void optimizer_step(float lr) = 0;

  // The input pipeline's side (data/batch_loader.h). make_batch_memory: where the loaders put
  // the batches: host vectors, or with staged (a prefetching pipeline) on a GPU, pinned host
  // buffers whose device copies the loaders start on a copy stream (gpu/batch_staging.h).
  // forward_batch: forward() on a batch of that memory (a staged one: from its device copy, once
  // the model's stream has waited for it).
  virtual std::unique_ptr<data::BatchMemory> make_batch_memory(bool /*staged*/) {
    return data::make_host_batch_memory();
  }
  virtual model::LossResult forward_batch(const data::BatchView& batch) {
    return forward(batch.images, batch.labels, static_cast<int>(batch.size));
  }

  // Activation memory of the replica's last step (model/activation_ledger.h): bytes held at most
  // at once during forward() and backward(), and allocated; on the GPU, device bytes.
  virtual model::ActivationMemory activation_memory() const = 0;

  // Loss and accuracy over count host images, no gradients.
  virtual model::Evaluation evaluate(std::span<const float> images, std::span<const int32_t> labels,
                                     int64_t count) = 0;

  // The replica's state as host tensors: the parameters under their own names, then the
  // optimizer's velocity as "optimizer.velocity.<name>". What broadcasts and checkpoints carry.
  // Read them after state_to_host(); after writing them call state_from_host().
  virtual std::vector<hvd::NamedTensor> state() = 0;
  virtual void state_to_host() {}
  virtual void state_from_host() {}

  // The flat parameter vector in host memory (after state_to_host()).
  virtual std::span<const float> flat_parameters() = 0;
};

// The network for a resolved device. Throws hvd::InvalidArgumentError for a device this build
// cannot drive.
std::unique_ptr<Network> make_network(const DeviceChoice& device, const NetworkOptions& options);

}  // namespace train_cnn
