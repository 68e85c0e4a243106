#pragma once

// FusedAllreduce's memory policy for CPU tensors (ops/fused_allreduce.h): the persistent host
// fusion buffer, packed without padding between tensors (offsets in bytes, alignment 1: every
// size is a whole number of elements), with the scaling fused into the copies (scale_copy,
// common/dtype_math.h). Under HVD_COMPRESSION the batch is packed as 16-bit values
// (compress_copy: the prescale folded into the cast, rounded once) and unpacked with
// decompress_copy (the factor folded in). Padding (parts > 1) is filled with zeros.

#include <cstdint>

#include "common/dtype_math.h"
#include "ops/collective_op.h"
#include "ops/fused_allreduce.h"
#include "ops/fusion_buffer.h"

namespace hvd::ops {

class HostMemory {
 public:
  static constexpr bool kTraceCopies = true;

  explicit HostMemory(FusionBuffer& buffer) : buffer_(&buffer) {}

  bool holds(const OpBatch&) const { return true; }
  void scale(DataType dtype, const void* src, void* dst, int64_t n, double factor) {
    scale_copy(dtype, src, dst, static_cast<std::size_t>(n), factor);
  }
  // `packed`: batch.dtype, or (float32/float64 batches) the 16-bit wire dtype of compression.
  PackedBatch pack(const OpBatch& batch, DataType packed, int64_t parts, double prescale);
  void unpack(OpBatch& batch, const PackedBatch& packed, double factor);

 private:
  FusionBuffer* buffer_;
};

}  // namespace hvd::ops
