#include "ops/host_memory.h"

#include <algorithm>
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

namespace {

// Calls piece(i, from, n) for each entry i with elements in [begin, end) of the packed buffer:
// `from` is the entry's first element in that range counted from the entry's start, `n` how many
// (n > 0). The entries lie back to back (alignment 1) as `layout` places them, `esize` bytes an
// element.
template <class Piece>
void for_each_piece(const FusionLayout& layout, int64_t esize, int64_t begin, int64_t end,
                    Piece&& piece) {
  const auto& off = layout.offsets;
  const std::size_t count = off.size();
  // The last entry that starts at or before `begin` (entries of no elements before it share its
  // offset).
  auto it = std::upper_bound(off.begin(), off.end(), begin * esize);
  std::size_t i = it == off.begin() ? 0 : static_cast<std::size_t>(it - off.begin()) - 1;
  for (; i < count; ++i) {
    const int64_t first = off[i] / esize;
    if (first >= end) break;
    const int64_t last = (i + 1 < count ? off[i + 1] : layout.total_bytes) / esize;
    const int64_t lo = std::max(first, begin), hi = std::min(last, end);
    if (hi > lo) piece(i, lo - first, hi - lo);
  }
}

}  // namespace

int HostMemory::slices(int64_t bytes) const {
  if (workers_ == nullptr || workers_->helpers() == 0 || bytes < kParallelBytes) return 1;
  const int64_t most = 4 * static_cast<int64_t>(workers_->helpers() + 1);
  return static_cast<int>(std::min(most, bytes / kSliceBytes));
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
  const int n_slices = slices(p.layout.total_bytes);
  if (n_slices == 1) {
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
  } else {
    const int64_t in_esize = static_cast<int64_t>(dtype_size(batch.dtype));
    workers_->run(n_slices, [&](int s) {
      for_each_piece(p.layout, esize, used * s / n_slices, used * (s + 1) / n_slices,
                     [&](std::size_t i, int64_t from, int64_t n) {
                       const char* src = static_cast<const char*>(batch.entries[i].input.data()) +
                                         from * in_esize;
                       char* dst = buf + p.layout.offsets[i] + from * esize;
                       const auto un = static_cast<std::size_t>(n);
                       if (plain)
                         std::memcpy(dst, src, static_cast<std::size_t>(n * esize));
                       else if (packed == batch.dtype)
                         scale_copy(batch.dtype, src, dst, un, prescale);
                       else
                         compress_copy(batch.dtype, packed, src, reinterpret_cast<uint16_t*>(dst),
                                       un, prescale);
                     });
    });
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
  const int n_slices = slices(p.layout.total_bytes);
  if (n_slices > 1) {
    const int64_t out_esize = static_cast<int64_t>(dtype_size(batch.dtype));
    const int64_t used = p.layout.total_bytes / esize;
    workers_->run(n_slices, [&](int s) {
      for_each_piece(p.layout, esize, used * s / n_slices, used * (s + 1) / n_slices,
                     [&](std::size_t i, int64_t from, int64_t n) {
                       const char* src = buf + p.layout.offsets[i] + from * esize;
                       char* dst =
                           static_cast<char*>(batch.entries[i].output.data()) + from * out_esize;
                       const auto un = static_cast<std::size_t>(n);
                       if (plain)
                         std::memcpy(dst, src, static_cast<std::size_t>(n * esize));
                       else if (p.dtype == batch.dtype)
                         scale_copy(batch.dtype, src, dst, un, factor);
                       else
                         decompress_copy(p.dtype, batch.dtype,
                                         reinterpret_cast<const uint16_t*>(src), dst, un, factor);
                     });
    });
    g_unpacked_bytes.fetch_add(p.layout.total_bytes, std::memory_order_relaxed);
    return;
  }
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
