#include "gpu/cudnn_network.h"

#include <span>
#include <string>
#include <vector>

#include "gpu/batch_staging.h"
#include "gpu/check.h"
#include "gpu/cudnn_model.h"
#include "gpu/kernels.h"
#include "gpu/sgd_momentum.h"
#include "network_adapter.h"

namespace train_cnn::gpu {
namespace {

// The GPU replica's device side of NetworkAdapter: gradients stay on the device (with the model's
// stream), the state lives in host mirrors that to_host()/from_host() copy.
class CudnnDevice {
 public:
  CudnnDevice(CudnnModel& net, const NetworkOptions& options)
      : host_params_(static_cast<size_t>(net.num_parameters())),
        host_velocity_(host_params_.size()),
        wire_dtype_(options.gradient_dtype) {
    if (wire_dtype_ == hvd::DataType::kFloat32) return;
    if (wire_dtype_ != hvd::DataType::kBFloat16 && wire_dtype_ != hvd::DataType::kFloat16) {
      throw hvd::InvalidArgumentError(
          std::string("--gradient-allreduce: the GPU network all-reduces gradients in fp32, bf16 "
                      "or fp16, not ") +
          hvd::dtype_name(wire_dtype_) + ".");
    }
    net.context().activate();
    wire_.resize(static_cast<size_t>(net.num_parameters()));
  }

  static SgdMomentum make_optimizer(CudnnModel& net, const model::SgdMomentumOptions& options) {
    return SgdMomentum(net.context(), net.num_parameters(), options);
  }
  std::string description(const CudnnModel& net) const {
    return "cuda:" + std::to_string(net.device()) + " (cuDNN, cuBLAS)";
  }
  hvd::TensorRef gradient(CudnnModel& net, size_t i) {
    const GpuParameterTensor& p = net.parameters().at(i);
    if (wire_dtype_ != hvd::DataType::kFloat32) {
      return hvd::TensorRef(wire_.data() + p.offset, wire_dtype_, p.shape,
                            hvd::Device::cuda(net.device()), static_cast<void*>(net.stream()));
    }
    return hvd::TensorRef(p.gradient, hvd::DataType::kFloat32, p.shape,
                          hvd::Device::cuda(net.device()), static_cast<void*>(net.stream()));
  }
  // Gradient i is final in stream order: its 16-bit copy for the all-reduce, queued behind it.
  void gradient_ready(CudnnModel& net, size_t i) {
    if (wire_dtype_ == hvd::DataType::kFloat32) return;
    const GpuParameterTensor& p = net.parameters().at(i);
    cast_float_to_half(p.gradient, wire_.data() + p.offset, p.size, wire_format(), net.stream());
  }
  // After the all-reduces (which hvd completes on the model's stream): the averaged 16-bit copies
  // back into the float32 gradients (exact), one kernel over the flat vector.
  void gradients_reduced(CudnnModel& net) {
    if (wire_dtype_ == hvd::DataType::kFloat32) return;
    net.context().activate();
    cast_half_to_float(wire_.data(), net.flat_gradients(), net.num_parameters(), wire_format(),
                       net.stream());
  }
  // Mixed precision: the flat float32 gradients, one device tensor on the model's stream, to
  // hvd::LossScaler::unscale (times 1/scale and checked for Inf/NaN on the device, one kernel;
  // it waits for the flag).
  bool unscale_gradients(CudnnModel& net, const hvd::LossScaler& scaler) {
    return scaler.unscale(
        {hvd::TensorRef(net.flat_gradients(), hvd::DataType::kFloat32, {net.num_parameters()},
                        hvd::Device::cuda(net.device()), static_cast<void*>(net.stream()))});
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
  HalfFormat wire_format() const {
    return wire_dtype_ == hvd::DataType::kBFloat16 ? HalfFormat::kBf16 : HalfFormat::kFp16;
  }

  std::vector<float> host_params_, host_velocity_;
  hvd::DataType wire_dtype_;    // NetworkOptions::gradient_dtype
  DeviceArray<uint16_t> wire_;  // 16-bit copies of the gradients (flat layout), or empty
};

}  // namespace

std::unique_ptr<Network> make_cudnn_network(const GpuOptions& gpu, const NetworkOptions& options) {
  return std::make_unique<NetworkAdapter<CudnnModel, SgdMomentum, CudnnDevice>>(options, gpu);
}

}  // namespace train_cnn::gpu
