#pragma once

// A persistent host buffer for fused tensors: grows to the largest size asked for and is reused
// for every later batch, so the hot path does not allocate. 64-byte aligned. Owned by the
// background thread.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

namespace hvd::ops {

class FusionBuffer {
 public:
  // A buffer of at least `bytes`; the contents are unspecified.
  void* get(std::size_t bytes);
  std::size_t capacity() const { return capacity_; }

 private:
  struct Free {
    void operator()(void* p) const;
  };
  std::unique_ptr<void, Free> data_;
  std::size_t capacity_ = 0;
};

// Where each tensor goes in a fusion buffer: offsets rounded up to `alignment` bytes (a power of
// two; 1 for none). total_bytes is the buffer size needed.
struct FusionLayout {
  std::vector<int64_t> offsets;
  int64_t total_bytes = 0;
};
FusionLayout fusion_layout(const std::vector<int64_t>& sizes_bytes, int64_t alignment);

}  // namespace hvd::ops
