#include "network.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "hvd/config.h"
#include "hvd/error.h"
#include "model/sgd_momentum.h"

// TRAIN_CNN_GPU_MODEL is 1 when examples/train_cnn/CMakeLists.txt builds the cuDNN model
// (examples/train_cnn/gpu, only with HVD_HAVE_CUDNN); 0 otherwise.
#ifndef TRAIN_CNN_GPU_MODEL
#define TRAIN_CNN_GPU_MODEL 0
#endif
#if TRAIN_CNN_GPU_MODEL
#include "gpu/context.h"        // GPU MODEL: gpu::device_count()
#include "gpu/cudnn_network.h"  // GPU MODEL: gpu::make_cudnn_network()
#endif

namespace train_cnn {
namespace {

// The CPU replica: model::Model (im2col + OpenBLAS GEMM, one BLAS thread) and model::SgdMomentum
// over its flat parameter vector. Everything lives in host memory, so state() are plain views and
// state_to_host()/state_from_host() do nothing.
class CpuNetwork : public Network {
 public:
  explicit CpuNetwork(const NetworkOptions& options)
      : net_(options.model),
        opt_(net_.num_parameters(),
             {.momentum = options.momentum, .weight_decay = options.weight_decay}) {}

  std::string description() const override { return "cpu (OpenBLAS, 1 thread per rank)"; }
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
    auto& p = net_.parameters().at(i);
    return hvd::TensorRef(p.gradient.data(), hvd::DataType::kFloat32, p.shape);
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
    const auto& params = net_.parameters();
    for (const auto& p : params)
      out.push_back({p.name, hvd::TensorRef(p.value.data(), hvd::DataType::kFloat32, p.shape)});
    std::span<float> velocity = opt_.velocity();
    for (const auto& p : params)
      out.push_back({"optimizer.velocity." + p.name,
                     hvd::TensorRef(velocity.data() + p.offset, hvd::DataType::kFloat32, p.shape)});
    return out;
  }
  std::span<const float> flat_parameters() override { return net_.flat_parameters(); }

 private:
  model::Model net_;
  model::SgdMomentum opt_;
};

int visible_cuda_devices() {
#if TRAIN_CNN_GPU_MODEL
  // GPU MODEL: the visible CUDA devices (0 when the driver reports none).
  return gpu::device_count();
#else
  return 0;
#endif
}

}  // namespace

DeviceChoice resolve_device(const std::string& requested, int local_rank) {
  DeviceChoice cpu{DeviceKind::kCpu, 0, "cpu (OpenBLAS, 1 thread per rank)"};
  if (requested == "cpu") return cpu;
  if (requested != "auto" && requested != "cuda")
    throw hvd::InvalidArgumentError("--device is '" + requested +
                                    "': it must be auto, cpu or cuda.");
  const bool built = HVD_HAVE_CUDNN && TRAIN_CNN_GPU_MODEL;
  const int devices = built ? visible_cuda_devices() : 0;
  if (built && devices > 0) {
    const int index = local_rank % std::max(devices, 1);
    return {DeviceKind::kCuda, index, "cuda:" + std::to_string(index) + " (cuDNN, cuBLAS)"};
  }
  if (requested == "auto") return cpu;
  if (!HVD_HAVE_CUDNN)
    throw hvd::InvalidArgumentError(
        "--device cuda: this build has no GPU support (hvd was configured without CUDA and cuDNN, "
        "HVD_HAVE_CUDNN is 0). Rebuild with -DHVD_WITH_CUDA=ON where CUDA and cuDNN are installed, "
        "or use --device cpu (or auto).");
  if (!TRAIN_CNN_GPU_MODEL)
    throw hvd::InvalidArgumentError(
        "--device cuda: the cuDNN model (examples/train_cnn/gpu) is not built into this train_cnn. "
        "Use --device cpu (or auto).");
  const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
  throw hvd::InvalidArgumentError(
      "--device cuda: no CUDA device is visible to this process (CUDA_VISIBLE_DEVICES=" +
      std::string(visible ? visible : "<unset>") +
      "). Check nvidia-smi and CUDA_VISIBLE_DEVICES, or use --device cpu (or auto).");
}

std::unique_ptr<Network> make_network(const DeviceChoice& device, const NetworkOptions& options) {
  switch (device.kind) {
    case DeviceKind::kCpu:
      return std::make_unique<CpuNetwork>(options);
    case DeviceKind::kCuda:
#if TRAIN_CNN_GPU_MODEL
      // GPU MODEL: gpu::CudnnModel behind the Network interface (gpu/cudnn_network.h): gradients
      // on the device with the model's stream, the optimizer on the device, state() in host
      // mirrors synchronised by state_to_host()/state_from_host().
      return gpu::make_cudnn_network({.device = device.index}, options);
#endif
      break;
  }
  throw hvd::InvalidArgumentError("make_network: " + device.description +
                                  " is not supported by this build; use --device cpu.");
}

}  // namespace train_cnn
