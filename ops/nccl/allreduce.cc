// Allreduce over NCCL: the skeleton of ops/fused_allreduce.h on device memory
// (ops/cuda/device_memory.h).
//
// One tensor on the device: reduced straight from the caller's input into its output (in place
// when they are the same), so the common unfused case adds no copy. A prescale is applied by the
// scale kernel while copying input to output; the postscale (and 1/contributors for kAverage)
// by the scale kernel afterwards.
// A fused batch (or one with a joined rank's host stand-in): packed into the device fusion buffer
// by one batched copy kernel, prescaled, reduced by one ncclAllReduce, postscaled, unpacked by one
// batched copy kernel: four launches and one NCCL call for any number of tensors.
//
// Why kAverage is ncclSum plus the scale kernel rather than ncclAvg: ncclAvg pre-multiplies each
// contribution by 1/n, which rounds differently from summing and dividing once; the scale kernel
// gives the same bits as the CPU path (common/dtype_math.h) for every dtype, integers included, and
// costs one pass over data that is already in L2 for small tensors.
//
// fp16 compression (HVD_COMPRESSION=fp16): float32 sums and averages, one tensor or many, go
// through the fusion buffer; they are cast to float16 in the fusion buffer's shadow (scratch),
// reduced as float16 (half the bytes on the wire), and cast back with the postscale folded into
// the cast.
// Other dtypes and ops are never compressed.
#include "common/cuda/device_math.h"
#include "ops/nccl/nccl_ops.h"

namespace hvd::ops::nccl {

bool NcclAllreduce::compressed(const OpBatch& batch) const {
  return options_.fp16_compression && batch.dtype == DataType::kFloat32 &&
         (batch.reduce_op == ReduceOp::kSum || batch.reduce_op == ReduceOp::kAverage);
}

void NcclAllreduce::execute(OpBatch& batch) {
  begin(batch);
  FusedAllreduce::execute(batch);
  end();
}

double NcclAllreduce::reduce(const void* in, void* out, int64_t count, DataType dtype,
                             const OpBatch& batch, double post) {
  const size_t n = static_cast<size_t>(count);
  if (compressed(batch)) {  // in the fusion buffer: in == out
    auto* half = static_cast<uint16_t*>(ctx_.cuda().scratch().get(n * 2, stream()));
    device_math::cast(DataType::kFloat32, DataType::kFloat16, in, half, count, 1.0, stream());
    NCCL_CHECK(ncclAllReduce(half, half, n, ncclFloat16, ncclSum, ctx_.world(), stream()));
    device_math::cast(DataType::kFloat16, DataType::kFloat32, half, out, count, post, stream());
    return 1.0;
  }
  NCCL_CHECK(ncclAllReduce(in, out, n, nccl_type(dtype), nccl_op(batch.reduce_op), ctx_.world(),
                           stream()));
  return post;
}

}  // namespace hvd::ops::nccl
