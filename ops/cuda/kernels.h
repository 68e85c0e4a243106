#pragma once

// Kernels of the GPU data path (ops/cuda/kernels.cu), each launched on the caller's stream and
// asynchronous; the launch is checked with CUDA_CHECK (a bad configuration throws), the execution
// by the stream's later completion event.
//
//   batched_copy: one launch copies many (src, dst, bytes) ranges: packing a fused batch into the
//     device fusion buffer and unpacking it again cost one launch, not one cudaMemcpyAsync per
//     tensor. The descriptors live in device memory (copied there by the caller, stream-ordered).
//   scale: dst = src * factor for every hvd dtype, with the CPU path's rounding
//   (common/dtype_math.h):
//     fp16/bf16 computed in float and rounded to nearest even, float in float when the factor is
//     exact in float, integers multiplied in double and truncated toward zero with saturation.
//   cast_to_half / cast_from_half: fp32 <-> fp16 (round to nearest even) with a scale factor, for
//     the fp16 compression of fp32 gradients on the wire.

#include <cuda_runtime_api.h>

#include <cstdint>

#include "hvd/tensor.h"

namespace hvd::ops::cuda {

struct CopyDescriptor {
  const void* src;
  void* dst;
  int64_t bytes;
};

// `descs`: a device array of `count` descriptors; `max_bytes`: the largest of their sizes (sizes
// the grid). Ranges must not overlap.
void batched_copy(const CopyDescriptor* descs, int count, int64_t max_bytes, cudaStream_t stream);

// n elements; src == dst allowed; factor == 1 with src == dst does nothing.
void scale(DataType dtype, const void* src, void* dst, int64_t n, double factor,
           cudaStream_t stream);

// fp32 -> fp16 (dst[i] = half(src[i] * factor)) and back (dst[i] = float(src[i]) * factor).
void cast_to_half(const float* src, uint16_t* dst, int64_t n, double factor, cudaStream_t stream);
void cast_from_half(const uint16_t* src, float* dst, int64_t n, double factor, cudaStream_t stream);

}  // namespace hvd::ops::cuda
