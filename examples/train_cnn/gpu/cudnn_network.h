#pragma once

// The GPU replica behind train_cnn's Network interface (network.h): a NetworkAdapter
// (network_adapter.h) over gpu::CudnnModel and gpu::SgdMomentum on one CUDA device. Compiled into
// the train_cnn executable (it needs the hvd public headers and network.h), not into
// train_cnn_gpu; make_network() in network.cc returns it for DeviceKind::kCuda.
//
//   gradient(i)      device memory, hvd::Device::cuda(device), with the model's stream: hvd orders
//                    its all-reduce after the kernels that produce the gradient (no host wait)
//   optimizer_step   on the device, queued after the all-reduces (which hvd completes on the
//                    model's stream before the handles report ready)
//   state()          host mirrors of the parameters and the velocity (names as the CPU network);
//                    state_to_host() fills them from the device, state_from_host() uploads them
//   forward()        waits for the loss (the Network interface returns it)
//   --precision      bf16 / fp16: the model computes in 16 bits on tensor cores, its gradients are
//                    float32 (gpu/cudnn_model.h); unscale_gradients() unscales and checks them on
//                    the device (hvd::LossScaler::unscale of the flat device vector),
//                    LossScaler::update() agrees across ranks
//   gradient dtype   NetworkOptions::gradient_dtype bf16 / fp16 (--gradient-allreduce): gradient(i)
//                    is a 16-bit device copy of the float32 gradient (rounded to nearest even as
//                    the strategy rounds host gradients), all-reduced as such; gradients_reduced()
//                    widens the averaged copies back into the float32 gradients

#include <memory>

#include "gpu/context.h"
#include "network.h"

namespace train_cnn::gpu {

// gpu.device: the CUDA device (local rank modulo device_count()); gpu.allow_tf32 for TF32 math.
std::unique_ptr<Network> make_cudnn_network(const GpuOptions& gpu, const NetworkOptions& options);

}  // namespace train_cnn::gpu
