#include "ops/host_memory.h"

#include <atomic>
#include <cstring>
#include <vector>

namespace hvd::ops {
namespace {

std::atomic<int64_t> g_packed_bytes{0};
std::atomic<int64_t> g_unpacked_bytes{0};
std::atomic<int64_t> g_batches{0};

}  // namespace

FusionCopyCounts fusion_copy_counts() {
  FusionCopyCounts c;
  c.packed_bytes = g_packed_bytes.load(std::memory_order_relaxed);
  c.unpacked_bytes = g_unpacked_bytes.load(std::memory_order_relaxed);
  c.batches = g_batches.load(std::memory_order_relaxed);
  return c;
}

PackedBatch HostMemory::pack(const OpBatch& batch, DataType packed, int64_t parts,
                             double prescale) {
  const int64_t esize = static_cast<int64_t>(dtype_size(packed));
  std::vector<int64_t> sizes;
  sizes.reserve(batch.entries.size());
  for (const auto& e : batch.entries) sizes.push_back(e.input.num_elements() * esize);
  PackedBatch p;
  p.dtype = packed;
  p.layout = fusion_layout(sizes, 1);
  const int64_t used = p.layout.total_bytes / esize;
  if (parts < 1) parts = 1;
  p.count = (used + parts - 1) / parts * parts;
  char* buf = static_cast<char*>(buffer_->get(static_cast<std::size_t>(p.count * esize)));
  p.data = buf;
  for (std::size_t i = 0; i < batch.entries.size(); ++i) {
    const auto& e = batch.entries[i];
    const auto n = static_cast<std::size_t>(e.input.num_elements());
    char* dst = buf + p.layout.offsets[i];
    if (packed == batch.dtype)
      scale_copy(batch.dtype, e.input.data(), dst, n, prescale);
    else
      compress_copy(batch.dtype, packed, e.input.data(), reinterpret_cast<uint16_t*>(dst), n,
                    prescale);
  }
  if (p.count > used)
    std::memset(buf + used * esize, 0, static_cast<std::size_t>((p.count - used) * esize));
  g_packed_bytes.fetch_add(p.count * esize, std::memory_order_relaxed);
  g_batches.fetch_add(1, std::memory_order_relaxed);
  return p;
}

void HostMemory::unpack(OpBatch& batch, const PackedBatch& p, double factor) {
  const char* buf = static_cast<const char*>(p.data);
  int64_t bytes = 0;
  for (std::size_t i = 0; i < batch.entries.size(); ++i) {
    auto& e = batch.entries[i];
    const auto n = static_cast<std::size_t>(e.output.num_elements());
    bytes += static_cast<int64_t>(n * dtype_size(p.dtype));
    const char* src = buf + p.layout.offsets[i];
    if (p.dtype == batch.dtype)
      scale_copy(batch.dtype, src, e.output.data(), n, factor);
    else
      decompress_copy(p.dtype, batch.dtype, reinterpret_cast<const uint16_t*>(src), e.output.data(),
                      n, factor);
  }
  g_unpacked_bytes.fetch_add(bytes, std::memory_order_relaxed);
}

}  // namespace hvd::ops
