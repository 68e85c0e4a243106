// Reducescatter over NCCL with blocks of whole rows, as even as possible (the first rows % size
// ranks get one more row, as on the MPI path). Equal blocks: one ncclReduceScatter. Unequal: one
// ncclReduce per block to its owner, grouped. The prescale goes to a device copy (the caller's
// input is never modified); the postscale (and 1/contributors for kAverage) to the block, which is
// then copied into the host result Tensor.
#include "common/cuda/device_math.h"
#include "ops/nccl/nccl_ops.h"

namespace hvd::ops::nccl {

void NcclReducescatter::execute(OpBatch& batch) {
  begin(batch);
  cudaStream_t s = stream();
  OpEntry& e = batch.entries.at(0);
  const auto& shape = e.input.shape();
  const int size = ctx_.mpi().topology().size;
  const int me = ctx_.mpi().topology().rank;
  const int64_t rows = shape.empty() ? 1 : shape[0];
  int64_t row_elems = 1;
  for (size_t d = 1; d < shape.size(); ++d) row_elems *= shape[d];
  const int64_t esize = static_cast<int64_t>(dtype_size(batch.dtype));
  std::vector<int64_t> counts(static_cast<size_t>(size)), offsets(static_cast<size_t>(size));
  bool equal = true;
  int64_t off = 0;
  for (int r = 0; r < size; ++r) {
    counts[r] = (rows / size + (r < rows % size ? 1 : 0)) * row_elems;
    offsets[r] = off;
    off += counts[r];
    equal = equal && counts[r] == counts[0];
  }
  std::vector<int64_t> out_shape = shape.empty() ? std::vector<int64_t>{1} : shape.vec();
  out_shape[0] = rows / size + (me < rows % size ? 1 : 0);
  *e.result = Tensor(batch.dtype, out_shape);
  const int64_t n = e.input.num_elements();
  if (n > 0) {
    cuda::CudaContext& cu = ctx_.cuda();
    const char* send = static_cast<const char*>(on_device(e.input, cu.scratch()));
    if (batch.prescale != 1.0) {
      void* tmp = cu.scratch().get(static_cast<size_t>(n * esize), s);
      device_math::scale(batch.dtype, send, tmp, n, batch.prescale,
                         s);  // in place when send is scratch
      send = static_cast<const char*>(tmp);
    }
    char* block = static_cast<char*>(
        cu.fusion_buffer().get(static_cast<size_t>(std::max<int64_t>(counts[me], 1) * esize), s));
    const ncclDataType_t t = nccl_type(batch.dtype);
    const ncclRedOp_t op = nccl_op(batch.reduce_op);
    ncclComm_t comm = ctx_.world();  // before the group (nccl_context.h)
    if (equal) {
      NCCL_CHECK(ncclReduceScatter(send, block, static_cast<size_t>(counts[0]), t, op, comm, s));
    } else {
      NCCL_CHECK(ncclGroupStart());
      for (int r = 0; r < size; ++r) {
        if (counts[r] == 0) continue;
        NCCL_CHECK(ncclReduce(send + offsets[r] * esize, r == me ? block : nullptr,
                              static_cast<size_t>(counts[r]), t, op, r, comm, s));
      }
      NCCL_CHECK(ncclGroupEnd());
    }
    if (counts[me] > 0) {
      device_math::scale(batch.dtype, block, block, counts[me], post_factor(batch), s);
      CUDA_CHECK(cudaMemcpyAsync(e.result->data(), block, static_cast<size_t>(counts[me] * esize),
                                 cudaMemcpyDeviceToHost, s));
    }
  }
  end();
}

}  // namespace hvd::ops::nccl
