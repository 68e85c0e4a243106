#pragma once

// FusedAllreduce's memory policy for CUDA tensors (ops/fused_allreduce.h), on hvd's stream of the
// CudaContext (activated by the op before execute): the device fusion buffer
// (ops/cuda/device_layout.h: tensors on 256-byte boundaries, the element count padded to a
// multiple of `parts`), packed and unpacked by one batched copy kernel each, with the prescale and
// the postscale applied by the scale kernel to the whole buffer (one launch each: the gaps are
// scaled too, and never copied out). Four launches for any number of tensors. A joined rank's host
// stand-ins are copied with cudaMemcpyAsync (the device-to-host direction is synchronous).
// Nothing here waits on the host. CUDA build only.

#include <cstdint>

#include "ops/collective_op.h"
#include "ops/cuda/cuda_context.h"
#include "common/cuda/device_math.h"
#include "ops/cuda/kernels.h"
#include "ops/fused_allreduce.h"

namespace hvd::ops::cuda {

class DeviceMemory {
 public:
  static constexpr bool kTraceCopies = false;  // the copies are asynchronous

  explicit DeviceMemory(CudaContext& cuda) : cuda_(&cuda) {}

  // Every input and output is a CUDA tensor (not a joined rank's host stand-in).
  bool holds(const OpBatch& batch) const;
  void scale(DataType dtype, const void* src, void* dst, int64_t n, double factor) {
    device_math::scale(dtype, src, dst, n, factor, cuda_->stream());
  }
  // `packed` must be batch.dtype (the device memory does not cast).
  PackedBatch pack(const OpBatch& batch, DataType packed, int64_t parts, double prescale);
  void unpack(OpBatch& batch, const PackedBatch& packed, double factor);

 private:
  CudaContext* cuda_;
};

}  // namespace hvd::ops::cuda
