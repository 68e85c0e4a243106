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
  // The common case, a plain copy, calls memcpy straight away: at a thousand small tensors a
  // batch, the per-tensor calls around it (the element count again, scale_copy) cost a third as
  // much as the copies of 4 KiB themselves.
  const bool plain = packed == batch.dtype && prescale == 1.0;
  for (std::size_t i = 0; i < batch.entries.size(); ++i) {
    if (sizes[i] == 0) continue;
    const auto& e = batch.entries[i];
    char* dst = buf + p.layout.offsets[i];
    const auto n = static_cast<std::size_t>(sizes[i] / esize);
    if (plain)
      std::memcpy(dst, e.input.data(), static_cast<std::size_t>(sizes[i]));
    else if (packed == batch.dtype)
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
  const int64_t esize = static_cast<int64_t>(dtype_size(p.dtype));
  const bool plain = p.dtype == batch.dtype && factor == 1.0;
  const std::size_t count = batch.entries.size();
  int64_t bytes = 0;
  for (std::size_t i = 0; i < count; ++i) {
    // The entries lie back to back in the buffer (pack()'s layout has no gaps): an entry's bytes
    // are the distance to the next one's, as pack() sized them from the inputs (an output has
    // its input's size).
    const int64_t at = p.layout.offsets[i];
    const int64_t size = (i + 1 < count ? p.layout.offsets[i + 1] : p.layout.total_bytes) - at;
    if (size == 0) continue;
    bytes += size;
    auto& e = batch.entries[i];
    const char* src = buf + at;
    const auto n = static_cast<std::size_t>(size / esize);
    if (plain)
      std::memcpy(e.output.data(), src, static_cast<std::size_t>(size));
    else if (p.dtype == batch.dtype)
      scale_copy(batch.dtype, src, e.output.data(), n, factor);
    else
      decompress_copy(p.dtype, batch.dtype, reinterpret_cast<const uint16_t*>(src), e.output.data(),
                      n, factor);
  }
  g_unpacked_bytes.fetch_add(bytes, std::memory_order_relaxed);
}

}  // namespace hvd::ops
