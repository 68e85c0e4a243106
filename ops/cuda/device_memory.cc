#include "ops/cuda/device_memory.h"

#include <algorithm>
#include <vector>

#include "hvd/error.h"
#include "ops/cuda/device_layout.h"

namespace hvd::ops::cuda {

namespace {

// One batched copy of `descs` (a pageable host-to-device copy of the descriptors is staged by the
// driver before cudaMemcpyAsync returns, so the vector may go out of scope at once; the device
// array is reused in stream order).
void copy_all(CudaContext& cu, const std::vector<CopyDescriptor>& descs, int64_t max_bytes) {
  if (descs.empty()) return;
  cudaStream_t s = cu.stream();
  const size_t dbytes = descs.size() * sizeof(CopyDescriptor);
  auto* dd = static_cast<CopyDescriptor*>(cu.descriptors().get(dbytes, s));
  CUDA_CHECK(cudaMemcpyAsync(dd, descs.data(), dbytes, cudaMemcpyHostToDevice, s));
  batched_copy(dd, static_cast<int>(descs.size()), max_bytes, s);
}

}  // namespace

bool DeviceMemory::holds(const OpBatch& batch) const {
  for (const auto& e : batch.entries)
    if (e.input.device().kind != Device::kCUDA || e.output.device().kind != Device::kCUDA)
      return false;
  return true;
}

PackedBatch DeviceMemory::pack(const OpBatch& batch, DataType packed, int64_t parts,
                               double prescale) {
  if (packed != batch.dtype)
    throw InvalidArgumentError("the device fusion buffer packs a batch in its own dtype");
  cudaStream_t s = cuda_->stream();
  std::vector<int64_t> sizes;
  sizes.reserve(batch.entries.size());
  for (const auto& e : batch.entries) sizes.push_back(static_cast<int64_t>(e.input.size_bytes()));
  const int64_t esize = static_cast<int64_t>(dtype_size(batch.dtype));
  DeviceFusionLayout d = device_fusion_layout(sizes, esize, static_cast<int>(parts));
  char* buf = static_cast<char*>(
      cuda_->fusion_buffer().get(static_cast<size_t>(std::max<int64_t>(d.bytes, 1)), s));
  std::vector<CopyDescriptor> descs;
  int64_t max_bytes = 0;
  for (size_t i = 0; i < batch.entries.size(); ++i) {
    const TensorRef& in = batch.entries[i].input;
    const int64_t bytes = sizes[i];
    if (bytes == 0) continue;
    char* dst = buf + d.layout.offsets[i];
    if (in.device().kind == Device::kCUDA) {
      descs.push_back({in.data(), dst, bytes});
      max_bytes = std::max(max_bytes, bytes);
    } else {
      CUDA_CHECK(
          cudaMemcpyAsync(dst, in.data(), static_cast<size_t>(bytes), cudaMemcpyHostToDevice, s));
    }
  }
  copy_all(*cuda_, descs, max_bytes);
  scale(batch.dtype, buf, buf, d.elements, prescale);
  PackedBatch p;
  p.data = buf;
  p.count = d.elements;
  p.dtype = batch.dtype;
  p.layout = std::move(d.layout);
  return p;
}

void DeviceMemory::unpack(OpBatch& batch, const PackedBatch& p, double factor) {
  cudaStream_t s = cuda_->stream();
  scale(batch.dtype, p.data, p.data, p.count, factor);
  const char* buf = static_cast<const char*>(p.data);
  std::vector<CopyDescriptor> descs;
  int64_t max_bytes = 0;
  for (size_t i = 0; i < batch.entries.size(); ++i) {
    const TensorRef& out = batch.entries[i].output;
    const int64_t bytes = static_cast<int64_t>(out.size_bytes());
    if (bytes == 0) continue;
    const char* src = buf + p.layout.offsets[i];
    if (out.device().kind == Device::kCUDA) {
      descs.push_back({src, out.data(), bytes});
      max_bytes = std::max(max_bytes, bytes);
    } else {
      // A joined rank's stand-in: a pageable destination makes this copy synchronous.
      CUDA_CHECK(
          cudaMemcpyAsync(out.data(), src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, s));
    }
  }
  copy_all(*cuda_, descs, max_bytes);
}

}  // namespace hvd::ops::cuda
