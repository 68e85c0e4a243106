#pragma once

// The device half of loss scaling for the cuDNN model (issue 14.2): hvd::LossScaler::unscale reads
// CPU tensors only, so fp32 gradients in device memory are unscaled and checked for Inf/NaN here,
// on the model's stream (gpu/kernels.h, unscale_and_check), and the rank-local flag is handed to
// hvd::LossScaler::update, which keeps its all-reduce of the flags: every rank agrees on skipping
// a step exactly as with the CPU model.
//
//   gpu::DeviceGradientUnscaler unscaler;
//   ... backward from loss x scaler.scale(); all-reduce the fp32 gradients ...
//   if (unscaler.unscale_and_update(scaler, net.flat_gradients(), net.num_parameters(),
//                                   net.stream()))
//     opt.step(net.flat_parameters(), net.flat_gradients(), lr);
//
// unscale() waits for the stream (the flag must reach the host before the collective); with a
// power-of-two scale (LossScaler's defaults) the unscaling is exact for every gradient that neither
// overflowed nor left float's normal range. Not thread-safe: one per training thread.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "gpu/device_buffer.h"
#include "hvd/loss_scaler.h"

namespace train_cnn::gpu {

class DeviceGradientUnscaler {
 public:
  DeviceGradientUnscaler();

  // Queues grads[0..n) *= 1/scale on stream, waits for it and returns true when any gradient was
  // Inf or NaN (before or after unscaling). scale must be finite and > 0 (hvd::InvalidArgumentError
  // otherwise); n may be 0.
  bool unscale(float* grads, int64_t n, double scale, cudaStream_t stream);

  // Collective: unscale(grads, n, scaler.scale()) then scaler.update(flag); true when the optimizer
  // should step (the same answer on every rank).
  bool unscale_and_update(hvd::LossScaler& scaler, float* grads, int64_t n, cudaStream_t stream) {
    return !scaler.update(unscale(grads, n, scaler.scale(), stream)).skipped;
  }

 private:
  DeviceArray<int32_t> flag_;       // [1] on the device
  PinnedArray<int32_t> host_flag_;  // [1] its copy
};

}  // namespace train_cnn::gpu
