#include "network.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "hvd/config.h"
#include "hvd/error.h"
#include "model/sgd_momentum.h"
#include "network_adapter.h"

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

constexpr const char* kCpuDescription = "cpu (OpenBLAS, 1 thread per rank)";

// The CPU replica's device side of NetworkAdapter: model::Model (im2col + OpenBLAS GEMM, one BLAS
// thread) and model::SgdMomentum over its flat parameter vector. Everything lives in host memory,
// so the state is the model's and the optimizer's own vectors and there is nothing to copy.
struct CpuDevice {
  CpuDevice(model::Model& /*net*/, const NetworkOptions& /*options*/) {}
  static model::SgdMomentum make_optimizer(model::Model& net,
                                           const model::SgdMomentumOptions& options) {
    return model::SgdMomentum(net.num_parameters(), options);
  }
  std::string description(const model::Model& /*net*/) const { return kCpuDescription; }
  hvd::TensorRef gradient(model::Model& net, size_t i) const {
    auto& p = net.parameters().at(i);
    return hvd::TensorRef(p.gradient.data(), hvd::DataType::kFloat32, p.shape);
  }
  std::span<float> parameters(model::Model& net) { return net.flat_parameters(); }
  std::span<float> velocity(model::SgdMomentum& opt) { return opt.velocity(); }
  void to_host(model::Model& /*net*/, model::SgdMomentum& /*opt*/) {}
  void from_host(model::Model& /*net*/, model::SgdMomentum& /*opt*/) {}
};

using CpuNetwork = NetworkAdapter<model::Model, model::SgdMomentum, CpuDevice>;

// The CPU model with its state in host mirrors of its own, as the GPU network keeps them
// (gpu/cudnn_network.cc): state() is read and written only through to_host()/from_host(). A test
// hook (TRAIN_CNN_TEST_HOST_MIRRORS=1): the trainer's state transfers (the initial broadcast,
// checkpoints, resume, --dump-weights) then run as on a GPU, on machines without one; a transfer
// that skips a to_host() or from_host() sends or keeps stale mirrors (the broadcast once sent the
// mirrors' zeros and the cuDNN model trained from all-zero weights).
struct MirroredCpuDevice : CpuDevice {
  MirroredCpuDevice(model::Model& net, const NetworkOptions& options)
      : CpuDevice(net, options),
        params_(static_cast<size_t>(net.num_parameters())),
        velocity_(params_.size()) {}
  std::span<float> parameters(model::Model& /*net*/) { return params_; }
  std::span<float> velocity(model::SgdMomentum& /*opt*/) { return velocity_; }
  void to_host(model::Model& net, model::SgdMomentum& opt) {
    std::ranges::copy(net.flat_parameters(), params_.begin());
    std::ranges::copy(opt.velocity(), velocity_.begin());
  }
  void from_host(model::Model& net, model::SgdMomentum& opt) {
    std::ranges::copy(params_, net.flat_parameters().begin());
    std::ranges::copy(velocity_, opt.velocity().begin());
  }

 private:
  std::vector<float> params_, velocity_;
};

using MirroredCpuNetwork = NetworkAdapter<model::Model, model::SgdMomentum, MirroredCpuDevice>;

bool test_host_mirrors() {
  const char* v = std::getenv("TRAIN_CNN_TEST_HOST_MIRRORS");
  return v != nullptr && std::string(v) == "1";
}

int visible_cuda_devices() {
#if TRAIN_CNN_GPU_MODEL
  // GPU MODEL: the visible CUDA devices (0 when the driver reports none).
  return gpu::device_count();
#else
  return 0;
#endif
}

}  // namespace

bool Network::unscale_gradients(const hvd::LossScaler& scaler) {
  std::vector<hvd::TensorRef> grads;
  const size_t n = parameter_names().size();
  grads.reserve(n);
  for (size_t i = 0; i < n; ++i) grads.push_back(gradient(i));
  return scaler.unscale(grads);
}

DeviceChoice resolve_device(const std::string& requested, int local_rank) {
  DeviceChoice cpu{DeviceKind::kCpu, 0, kCpuDescription};
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
      if (test_host_mirrors()) return std::make_unique<MirroredCpuNetwork>(options);
      return std::make_unique<CpuNetwork>(options);
    case DeviceKind::kCuda:
#if TRAIN_CNN_GPU_MODEL
      // GPU MODEL: gpu::CudnnModel behind the Network interface (gpu/cudnn_network.h): gradients
      // on the device with the model's stream, the optimizer on the device, state() in host
      // mirrors synchronised by state_to_host()/state_from_host(); --precision bf16|fp16 computes
      // in 16 bits on tensor cores (gpu/cudnn_model.h).
      return gpu::make_cudnn_network({.device = device.index}, options);
#endif
      break;
  }
  throw hvd::InvalidArgumentError("make_network: " + device.description +
                                  " is not supported by this build; use --device cpu.");
}

}  // namespace train_cnn
