#include "gpu/cudnn_network.h"

#include <string>
#include <vector>

#include "gpu/cudnn_model.h"
#include "gpu/sgd_momentum.h"

namespace train_cnn::gpu {
namespace {

class CudnnNetwork : public Network {
 public:
  CudnnNetwork(const GpuOptions& gpu, const NetworkOptions& options)
      : net_(options.model, gpu),
        opt_(net_.context(), net_.num_parameters(),
             {.momentum = options.momentum, .weight_decay = options.weight_decay}),
        host_params_(static_cast<size_t>(net_.num_parameters())),
        host_velocity_(host_params_.size()) {}

  std::string description() const override {
    return "cuda:" + std::to_string(net_.device()) + " (cuDNN, cuBLAS)";
  }
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
  void zero_gradients() override { net_.zero_gradients(); }
  model::LossResult forward(std::span<const float> images, std::span<const int32_t> labels,
                            int batch) override {
    return net_.forward(images, labels, batch);
  }
  void backward(const std::function<void(size_t)>& on_grad_ready) override {
    net_.backward(on_grad_ready);
  }
  hvd::TensorRef gradient(size_t i) override {
    const GpuParameterTensor& p = net_.parameters().at(i);
    return hvd::TensorRef(p.gradient, hvd::DataType::kFloat32, p.shape,
                          hvd::Device::cuda(net_.device()), static_cast<void*>(net_.stream()));
  }
  void optimizer_step(float lr) override {
    opt_.step(net_.flat_parameters(), net_.flat_gradients(), lr);
  }
  model::Model::Evaluation evaluate(std::span<const float> images, std::span<const int32_t> labels,
                                    int64_t count) override {
    return net_.evaluate(images, labels, count);
  }
  std::vector<hvd::NamedTensor> state() override {
    std::vector<hvd::NamedTensor> out;
    for (const auto& p : net_.parameters()) {
      out.push_back({p.name, hvd::TensorRef(host_params_.data() + p.offset, hvd::DataType::kFloat32,
                                            p.shape)});
    }
    for (const auto& p : net_.parameters()) {
      out.push_back(
          {"optimizer.velocity." + p.name,
           hvd::TensorRef(host_velocity_.data() + p.offset, hvd::DataType::kFloat32, p.shape)});
    }
    return out;
  }
  void state_to_host() override {
    net_.copy_parameters_to_host(host_params_);
    opt_.velocity_to_host(host_velocity_);
  }
  void state_from_host() override {
    net_.copy_parameters_from_host(host_params_);
    opt_.velocity_from_host(host_velocity_);
  }
  std::span<const float> flat_parameters() override { return host_params_; }

 private:
  CudnnModel net_;
  SgdMomentum opt_;
  std::vector<float> host_params_, host_velocity_;
};

}  // namespace

std::unique_ptr<Network> make_cudnn_network(const GpuOptions& gpu, const NetworkOptions& options) {
  return std::make_unique<CudnnNetwork>(gpu, options);
}

}  // namespace train_cnn::gpu
