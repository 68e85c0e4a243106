// Kernels of the GPU data path; see kernels.h for the contract.
//
// batched_copy: blockIdx.y walks the descriptors (grid-stride when there are more than 65535),
// blockIdx.x and the threads stride over one range's bytes. Ranges whose source and destination
// are both 16-byte aligned move as uint4 (the fusion buffer's 256-byte offsets and cudaMalloc'd
// tensors always are), then 4-byte words, then single bytes for whatever is left. One launch
// handles 1 or 500 tensors; the x dimension is sized from the largest range so that one big
// tensor still fills the GPU.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "hvd/error.h"
#include "ops/cuda/cuda_context.h"
#include "ops/cuda/kernels.h"

namespace hvd::ops::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void batched_copy_kernel(const CopyDescriptor* descs, int count) {
  for (int d = blockIdx.y; d < count; d += gridDim.y) {
    const CopyDescriptor c = descs[d];
    const char* src = static_cast<const char*>(c.src);
    char* dst = static_cast<char*>(c.dst);
    const int64_t n = c.bytes;
    const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
    const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
    const uintptr_t align = reinterpret_cast<uintptr_t>(src) | reinterpret_cast<uintptr_t>(dst);
    int64_t done = 0;
    if ((align & 15) == 0) {
      const int64_t n16 = n / 16;
      const uint4* s = reinterpret_cast<const uint4*>(src);
      uint4* t = reinterpret_cast<uint4*>(dst);
      for (int64_t i = tid; i < n16; i += stride) t[i] = s[i];
      done = n16 * 16;
    } else if ((align & 3) == 0) {
      const int64_t n4 = n / 4;
      const uint32_t* s = reinterpret_cast<const uint32_t*>(src);
      uint32_t* t = reinterpret_cast<uint32_t*>(dst);
      for (int64_t i = tid; i < n4; i += stride) t[i] = s[i];
      done = n4 * 4;
    }
    for (int64_t i = done + tid; i < n; i += stride) dst[i] = src[i];
  }
}

}  // namespace

void batched_copy(const CopyDescriptor* descs, int count, int64_t max_bytes, cudaStream_t stream) {
  if (count <= 0 || max_bytes <= 0) return;
  // About 64 KiB per block along x (256 threads x 16 B x 16 iterations), at most 1024 blocks.
  const unsigned gx =
      static_cast<unsigned>(std::clamp<int64_t>((max_bytes + 65535) / 65536, 1, 1024));
  const unsigned gy = static_cast<unsigned>(std::min(count, 65535));
  batched_copy_kernel<<<dim3(gx, gy), kThreads, 0, stream>>>(descs, count);
  CUDA_CHECK(cudaGetLastError());
}

}  // namespace hvd::ops::cuda
