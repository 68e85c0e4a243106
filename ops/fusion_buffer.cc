#include "ops/fusion_buffer.h"

#include <cstdlib>
#include <new>
#include <string>

#include "hvd/error.h"

namespace hvd::ops {

void FusionBuffer::Free::operator()(void* p) const { std::free(p); }

void* FusionBuffer::get(std::size_t bytes) {
  if (bytes > capacity_ || !data_) {
    std::size_t want = (bytes + 63) / 64 * 64;
    if (want == 0) want = 64;
    data_.reset();
    void* p = std::aligned_alloc(64, want);
    if (p == nullptr) throw std::bad_alloc();
    data_.reset(p);
    capacity_ = want;
  }
  return data_.get();
}

FusionLayout fusion_layout(const std::vector<int64_t>& sizes_bytes, int64_t alignment) {
  if (alignment <= 0 || (alignment & (alignment - 1)) != 0)
    throw InvalidArgumentError("fusion alignment " + std::to_string(alignment) +
                               " is not a power of two");
  FusionLayout layout;
  layout.offsets.reserve(sizes_bytes.size());
  int64_t off = 0;
  for (int64_t s : sizes_bytes) {
    off = (off + alignment - 1) & ~(alignment - 1);
    layout.offsets.push_back(off);
    off += s;
  }
  layout.total_bytes = off;
  return layout;
}

}  // namespace hvd::ops
