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

// Calls piece(i, from, bytes) for each entry i with bytes in [begin, end) of the packed buffer:
// `from` is where they start, counted from the entry's start, `bytes` how many (> 0). The entries
// lie back to back (alignment 1: pack()'s layout has no gaps), so an entry's bytes are the
// distance to the next one's; the bounds are whole elements, so the pieces are too.
template <class Piece>
void for_each_piece(const FusionLayout& layout, int64_t begin, int64_t end, Piece&& piece) {
  const auto& off = layout.offsets;
  const std::size_t count = off.size();
  // The last entry that starts at or before `begin` (entries of no bytes before it share its
  // offset).
  auto it = std::upper_bound(off.begin(), off.end(), begin);
  std::size_t i = it == off.begin() ? 0 : static_cast<std::size_t>(it - off.begin()) - 1;
  for (; i < count && off[i] < end; ++i) {
    const int64_t last = i + 1 < count ? off[i + 1] : layout.total_bytes;
    const int64_t lo = std::max(off[i], begin), hi = std::min(last, end);
    if (hi > lo) piece(i, lo - off[i], hi - lo);
  }
}

// Runs copy(begin, end) over the `bytes` of a packed buffer of `esize`-byte elements: at once on
// this thread, or in `slices` slices of whole elements on `workers`.
template <class Copy>
void copy_in_slices(CopyWorkers* workers, int slices, int64_t bytes, int64_t esize, Copy&& copy) {
  if (slices <= 1) {
    copy(int64_t{0}, bytes);
    return;
  }
  const int64_t elements = bytes / esize;
  workers->run(slices, [&](int s) {
    copy(elements * s / slices * esize, elements * (s + 1) / slices * esize);
  });
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
  // batch, the per-tensor calls around it (the element count, scale_copy) cost a third as much as
  // the copies of 4 KiB themselves.
  const bool plain = packed == batch.dtype && prescale == 1.0;
  const int64_t in_esize = static_cast<int64_t>(dtype_size(batch.dtype));
  auto piece = [&](std::size_t i, int64_t from, int64_t bytes) {
    char* dst = buf + p.layout.offsets[i] + from;
    const char* src = static_cast<const char*>(batch.entries[i].input.data());
    if (plain) {
      std::memcpy(dst, src + from, static_cast<std::size_t>(bytes));
      return;
    }
    src += from / esize * in_esize;
    const auto n = static_cast<std::size_t>(bytes / esize);
    if (packed == batch.dtype)
      scale_copy(batch.dtype, src, dst, n, prescale);
    else
      compress_copy(batch.dtype, packed, src, reinterpret_cast<uint16_t*>(dst), n, prescale);
  };
  copy_in_slices(workers_, slices(p.layout.total_bytes), p.layout.total_bytes, esize,
                 [&](int64_t begin, int64_t end) { for_each_piece(p.layout, begin, end, piece); });
  if (p.count > used)
    std::memset(buf + used * esize, 0, static_cast<std::size_t>((p.count - used) * esize));
  g_packed_bytes.fetch_add(p.count * esize, std::memory_order_relaxed);
  g_batches.fetch_add(1, std::memory_order_relaxed);
  return p;
}

void HostMemory::unpack(OpBatch& batch, const PackedBatch& p, double factor) {
  const char* buf = static_cast<const char*>(p.data);
  const int64_t esize = static_cast<int64_t>(dtype_size(p.dtype));
  const int64_t out_esize = static_cast<int64_t>(dtype_size(batch.dtype));
  const bool plain = p.dtype == batch.dtype && factor == 1.0;
  // An output has its input's size, so the layout pack() made from the inputs places it.
  auto piece = [&](std::size_t i, int64_t from, int64_t bytes) {
    const char* src = buf + p.layout.offsets[i] + from;
    char* dst = static_cast<char*>(batch.entries[i].output.data());
    if (plain) {
      std::memcpy(dst + from, src, static_cast<std::size_t>(bytes));
      return;
    }
    dst += from / esize * out_esize;
    const auto n = static_cast<std::size_t>(bytes / esize);
    if (p.dtype == batch.dtype)
      scale_copy(batch.dtype, src, dst, n, factor);
    else
      decompress_copy(p.dtype, batch.dtype, reinterpret_cast<const uint16_t*>(src), dst, n, factor);
  };
  copy_in_slices(workers_, slices(p.layout.total_bytes), p.layout.total_bytes, esize,
                 [&](int64_t begin, int64_t end) { for_each_piece(p.layout, begin, end, piece); });
  g_unpacked_bytes.fetch_add(p.layout.total_bytes, std::memory_order_relaxed);
}

}  // namespace hvd::ops
