#pragma once

// Kernels of the GPU data path (ops/cuda/kernels.cu), each launched on the caller's stream and
// asynchronous; the launch is checked with CUDA_CHECK (a bad configuration throws), the execution
// by the stream's later completion event.
//
//   batched_copy: one launch copies many (src, dst, bytes) ranges: packing a fused batch into the
//     device fusion buffer and unpacking it again cost one launch, not one cudaMemcpyAsync per
//     tensor. The descriptors live in device memory (copied there by the caller, stream-ordered).
// The element-wise dtype math (the pre- and post-scale, the fp16 wire format) is
// common/cuda/device_math.h, which the training layer shares.

#include <cuda_runtime_api.h>

#include <cstdint>

namespace hvd::ops::cuda {

struct CopyDescriptor {
  const void* src;
  void* dst;
  int64_t bytes;
};

// `descs`: a device array of `count` descriptors; `max_bytes`: the largest of their sizes (sizes
// the grid). Ranges must not overlap.
void batched_copy(const CopyDescriptor* descs, int count, int64_t max_bytes, cudaStream_t stream);

}  // namespace hvd::ops::cuda
