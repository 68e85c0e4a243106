#include "gpu/cudnn_network.h"

#include <span>
#include <string>
#include <vector>

#include "gpu/batch_staging.h"
#include "gpu/check.h"
#include "gpu/cudnn_model.h"
#include "gpu/sgd_momentum.h"
#include "network_adapter.h"

namespace train_cnn::gpu {
namespace {

// The GPU replica's device side of NetworkAdapter: gradients stay on the device (with the model's
// stream), the state lives in host mirrors that to_host()/from_host() copy.
class CudnnDevice {
 public:
  explicit CudnnDevice(CudnnModel& net)
      : host_params_(static_cast<size_t>(net.num_parameters())),
        host_velocity_(host_params_.size()) {}

  static SgdMomentum make_optimizer(CudnnModel& net, const model::SgdMomentumOptions& options) {
    return SgdMomentum(net.context(), net.num_parameters(), options);
  }
  std::string description(const CudnnModel& net) const {
    return "cuda:" + std::to_string(net.device()) + " (cuDNN, cuBLAS)";
  }
  hvd::TensorRef gradient(CudnnModel& net, size_t i) const {
    const GpuParameterTensor& p = net.parameters().at(i);
    return hvd::TensorRef(p.gradient, hvd::DataType::kFloat32, p.shape,
                          hvd::Device::cuda(net.device()), static_cast<void*>(net.stream()));
  }
  // Prefetched batches (data/batch_loader.h) staged in pinned memory and copied to the device by
  // the loader threads (gpu/batch_staging.h); the forward pass waits for the copy on the device.
  std::unique_ptr<data::BatchMemory> make_batch_memory(CudnnModel& net) {
    return make_staged_batch_memory(net.device(), net.stream());
  }
  model::LossResult forward_batch(CudnnModel& net, const data::BatchView& batch) {
    net.context().activate();
    CNN_CUDA_CHECK(cudaStreamWaitEvent(net.stream(), static_cast<cudaEvent_t>(batch.ready), 0));
    net.enqueue_forward_device(batch.device_images, batch.device_labels,
                               static_cast<int>(batch.size));
    return net.last_loss();
  }
  std::span<float> parameters(CudnnModel& /*net*/) { return host_params_; }
  std::span<float> velocity(SgdMomentum& /*opt*/) { return host_velocity_; }
  void to_host(CudnnModel& net, SgdMomentum& opt) {
    net.copy_parameters_to_host(host_params_);
    opt.velocity_to_host(host_velocity_);
  }
  void from_host(CudnnModel& net, SgdMomentum& opt) {
    net.copy_parameters_from_host(host_params_);
    opt.velocity_from_host(host_velocity_);
  }

 private:
  std::vector<float> host_params_, host_velocity_;
};

}  // namespace

std::unique_ptr<Network> make_cudnn_network(const GpuOptions& gpu, const NetworkOptions& options) {
  return std::make_unique<NetworkAdapter<CudnnModel, SgdMomentum, CudnnDevice>>(options, gpu);
}

}  // namespace train_cnn::gpu
