#pragma once

// FusedAllreduce's memory policy for CPU tensors (ops/fused_allreduce.h): the persistent host
// fusion buffer, packed without padding between tensors (offsets in bytes, alignment 1: every
// size is a whole number of elements), with the scaling fused into the copies (scale_copy,
// common/dtype_math.h). Under HVD_COMPRESSION the batch is packed as 16-bit values
// (compress_copy: the prescale folded into the cast, rounded once) and unpacked with
// decompress_copy (the factor folded in). Padding (parts > 1) is filled with zeros.
//
// With CopyWorkers that have helpers (HVD_COPY_THREADS, ops/copy_workers.h), a batch of at least
// kParallelBytes is copied in slices of the packed buffer's elements, cut across tensors where
// they fall, by the calling thread and the helpers together: every element is still written once,
// by the same copy, scale or cast as on one thread, so the result is the same bit for bit.
//
// Every pack() and unpack() adds the bytes it copied to process-wide counters
// (fusion_copy_counts()): the round trip through the fusion buffer that a batch of one tensor
// reduced directly does not make, observable by tests. The background thread adds, any thread
// reads (relaxed atomics: totals, not an ordering).

#include <cstdint>

#include "common/dtype_math.h"
#include "ops/collective_op.h"
#include "ops/copy_workers.h"
#include "ops/fused_allreduce.h"
#include "ops/fusion_buffer.h"

namespace hvd::ops {

// Bytes copied into and out of host fusion buffers by this process since it started (every
// HostMemory: the flat and hierarchical MPI all-reduces, the host-staged GPU path).
struct FusionCopyCounts {
  int64_t packed_bytes = 0;    // written into a buffer by pack(), padding included
  int64_t unpacked_bytes = 0;  // read out of a buffer by unpack()
  int64_t batches = 0;         // pack() calls
};
FusionCopyCounts fusion_copy_counts();

class HostMemory {
 public:
  static constexpr bool kTraceCopies = true;

  // Below this many packed bytes a batch is copied on the calling thread alone; slices are at
  // least kSliceBytes.
  static constexpr int64_t kParallelBytes = 256 << 10;
  static constexpr int64_t kSliceBytes = 64 << 10;

  // `workers`: null, or helpers for the copies (they must outlive this).
  explicit HostMemory(FusionBuffer& buffer, CopyWorkers* workers = nullptr)
      : buffer_(&buffer), workers_(workers) {}

  bool holds(const OpBatch&) const { return true; }
  void scale(DataType dtype, const void* src, void* dst, int64_t n, double factor) {
    scale_copy(dtype, src, dst, static_cast<std::size_t>(n), factor);
  }
  // `packed`: batch.dtype, or (float32/float64 batches) the 16-bit wire dtype of compression.
  PackedBatch pack(const OpBatch& batch, DataType packed, int64_t parts, double prescale);
  void unpack(OpBatch& batch, const PackedBatch& packed, double factor);

 private:
  // How many slices a copy of `bytes` is cut into: 1 without helpers or below kParallelBytes.
  int slices(int64_t bytes) const;

  FusionBuffer* buffer_;
  CopyWorkers* workers_;
};

}  // namespace hvd::ops
