// A deliberately slow producer for the readiness test: spins for `ms` milliseconds on the GPU,
// then writes `value` into every element. Launched on the user's stream.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

__global__ void slow_fill_kernel(float* data, int64_t n, float value, long long spin_ns) {
  if (threadIdx.x == 0) {
    const long long start = static_cast<long long>(clock64());
    // clock64 counts SM cycles; ~2 GHz on H100: spin_ns * 2 cycles, at least.
    while (static_cast<long long>(clock64()) - start < spin_ns * 2) {}
  }
  __syncthreads();
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    data[i] = value;
}

}  // namespace

cudaError_t launch_slow_fill(float* data, int64_t n, float value, double ms, cudaStream_t stream) {
  // One block: the spin happens once, and every element is written only after it.
  slow_fill_kernel<<<1, 256, 0, stream>>>(data, n, value, static_cast<long long>(ms * 1e6));
  return cudaGetLastError();
}
