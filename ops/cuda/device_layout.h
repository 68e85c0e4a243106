#pragma once

// Where the tensors of a fused GPU batch go in the device fusion buffer. No CUDA here, so the
// arithmetic is unit-tested on machines without a GPU.
//
// Every tensor starts on a 256-byte boundary: what cudaMalloc returns, so a tensor in the buffer
// is as aligned as one allocated alone (the copy kernel's 16-byte vector path, NCCL's fast path);
// and a multiple of every element size, so the fused buffer is an array of whole elements that one
// NCCL call reduces (the gaps are reduced too, and never copied out). For the hierarchical
// all-reduce the element count is padded to a multiple of `parts` (NCCL's ReduceScatter and
// AllGather need equal shards).

#include <cstdint>
#include <vector>

#include "ops/fusion_buffer.h"

namespace hvd::ops::cuda {

constexpr int64_t kDeviceFusionAlignment = 256;

struct DeviceFusionLayout {
  FusionLayout layout;   // offsets in bytes, 256-byte aligned
  int64_t elements = 0;  // elements to reduce: the bytes used, padded to a multiple of parts
  int64_t bytes = 0;     // buffer size needed: elements * element size
};

inline DeviceFusionLayout device_fusion_layout(const std::vector<int64_t>& sizes_bytes,
                                               int64_t element_size, int parts = 1) {
  DeviceFusionLayout d;
  d.layout = fusion_layout(sizes_bytes, kDeviceFusionAlignment);
  if (parts < 1) parts = 1;
  const int64_t used = (d.layout.total_bytes + element_size - 1) / element_size;
  d.elements = (used + parts - 1) / parts * parts;
  d.bytes = d.elements * element_size;
  return d;
}

}  // namespace hvd::ops::cuda
