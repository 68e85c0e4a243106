#pragma once

// NetworkAdapter: a model and its SGD-with-momentum optimizer behind the Network interface
// (network.h), written once for the CPU replica (network.cc: model::Model, model::SgdMomentum) and
// the GPU replica (gpu/cudnn_network.cc: gpu::CudnnModel, gpu::SgdMomentum).
//
// Model and Optimizer have the same member functions on both devices (the flat vectors are spans
// on the CPU, device pointers on the GPU). Device holds what differs, constructed from the model
// after the optimizer (Device(Model&, const NetworkOptions&)):
//   static Optimizer make_optimizer(Model&, const model::SgdMomentumOptions&)
//   std::string description(const Model&) const
//   hvd::TensorRef gradient(Model&, size_t i) const    host memory, or device memory + stream
//   std::span<float> parameters(Model&)                 the state in host memory: the model's and
//   std::span<float> velocity(Optimizer&)               optimizer's own vectors, or host mirrors
//   void to_host(Model&, Optimizer&)                    fill the host state (no-op on the CPU)
//   void from_host(Model&, Optimizer&)                  upload the host state (no-op on the CPU)
// and optionally (the GPU's CudnnDevice; otherwise what Network does):
//   void gradient_ready(Model&, size_t i)               gradient i is final, before on_grad_ready
//   void gradients_reduced(Model&)                      Network::gradients_reduced()
//   bool unscale_gradients(Model&, const LossScaler&)   Network::unscale_gradients()

#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hvd/checkpoint.h"
#include "hvd/error.h"
#include "hvd/tensor.h"
#include "model/sgd_momentum.h"
#include "network.h"

namespace train_cnn {

template <class Model, class Optimizer, class Device>
class NetworkAdapter final : public Network {
 public:
  // The model is constructed from options.model and then model_args (the GPU's GpuOptions).
  template <class... ModelArgs>
  explicit NetworkAdapter(const NetworkOptions& options, const ModelArgs&... model_args)
      : net_(options.model, model_args...),
        opt_(Device::make_optimizer(
            net_, {.momentum = options.momentum, .weight_decay = options.weight_decay})),
        device_(net_, options) {}

  std::string description() const override { return device_.description(net_); }
  int64_t num_parameters() const override { return net_.num_parameters(); }
  std::vector<std::string> parameter_names() const override {
    std::vector<std::string> names;
    for (const auto& p : net_.parameters()) names.push_back(p.name);
    return names;
  }
  void initialize(uint64_t seed) override {
    net_.initialize(seed);
    opt_.reset();
  }
  void set_loss_scale(float scale) override {
    if constexpr (requires { net_.set_loss_scale(scale); }) {
      net_.set_loss_scale(scale);
    } else if (scale != 1.0f) {
      throw hvd::InvalidArgumentError(description() +
                                      ": loss scaling (--precision bf16|fp16) is not implemented "
                                      "for this model; use --precision fp32.");
    }
  }
  void zero_gradients() override { net_.zero_gradients(); }
  model::LossResult forward(std::span<const float> images, std::span<const int32_t> labels,
                            int batch) override {
    return net_.forward(images, labels, batch);
  }
  // Device may stage prefetched batches on its device: make_batch_memory(Model&) and
  // forward_batch(Model&, const data::BatchView&) (the GPU's CudnnDevice); else the host path.
  std::unique_ptr<data::BatchMemory> make_batch_memory(bool staged) override {
    if constexpr (requires(Device & d, Model & m) { d.make_batch_memory(m); }) {
      if (staged) return device_.make_batch_memory(net_);
    }
    return Network::make_batch_memory(staged);
  }
  model::LossResult forward_batch(const data::BatchView& batch) override {
    if constexpr (requires(Device & d, Model & m) { d.forward_batch(m, batch); }) {
      if (batch.device_images != nullptr) return device_.forward_batch(net_, batch);
    }
    return Network::forward_batch(batch);
  }
  void backward(const std::function<void(size_t)>& on_grad_ready) override {
    if constexpr (requires(Device & d, Model & m) { d.gradient_ready(m, size_t{0}); }) {
      net_.backward([&](size_t i) {
        device_.gradient_ready(net_, i);
        if (on_grad_ready) on_grad_ready(i);
      });
    } else {
      net_.backward(on_grad_ready);
    }
  }
  hvd::TensorRef gradient(size_t i) override { return device_.gradient(net_, i); }
  void gradients_reduced() override {
    if constexpr (requires(Device & d, Model & m) { d.gradients_reduced(m); })
      device_.gradients_reduced(net_);
  }
  bool unscale_gradients(const hvd::LossScaler& scaler) override {
    if constexpr (requires(Device & d, Model & m) { d.unscale_gradients(m, scaler); }) {
      return device_.unscale_gradients(net_, scaler);
    } else {
      return Network::unscale_gradients(scaler);
    }
  }
  void optimizer_step(float lr) override {
    opt_.step(net_.flat_parameters(), net_.flat_gradients(), lr);
  }
  model::ActivationMemory activation_memory() const override { return net_.activation_memory(); }
  model::Evaluation evaluate(std::span<const float> images, std::span<const int32_t> labels,
                             int64_t count) override {
    return net_.evaluate(images, labels, count);
  }
  std::vector<hvd::NamedTensor> state() override {
    const std::span<float> values = device_.parameters(net_);
    const std::span<float> velocity = device_.velocity(opt_);
    std::vector<hvd::NamedTensor> out;
    for (const auto& p : net_.parameters()) out.push_back({p.name, host_tensor(values, p)});
    for (const auto& p : net_.parameters())
      out.push_back({"optimizer.velocity." + p.name, host_tensor(velocity, p)});
    return out;
  }
  void state_to_host() override { device_.to_host(net_, opt_); }
  void state_from_host() override { device_.from_host(net_, opt_); }
  std::span<const float> flat_parameters() override { return device_.parameters(net_); }

 private:
  // Parameter p's slice of a flat host vector.
  template <class Parameter>
  static hvd::TensorRef host_tensor(std::span<float> flat, const Parameter& p) {
    return hvd::TensorRef(flat.data() + p.offset, hvd::DataType::kFloat32, p.shape);
  }

  Model net_;
  Optimizer opt_;
  Device device_;
};

}  // namespace train_cnn
