// Allgather over NCCL into a device scratch buffer, then one copy into the host result Tensor.
// Equal first dimensions: one ncclAllGather. Different ones (allgatherv): one ncclBroadcast per
// rank into its displacement, grouped, which NCCL runs as concurrent rings.
#include <limits>

#include "hvd/error.h"
#include "ops/nccl/nccl_ops.h"

namespace hvd::ops::nccl {

void NcclAllgather::execute(OpBatch& batch) {
  begin(batch);
  cudaStream_t s = stream();
  OpEntry& e = batch.entries.at(0);
  const auto& shape = e.input.shape();
  const int64_t row = row_bytes(e.input);
  const int size = ctx_.mpi().topology().size;
  const int me = ctx_.mpi().topology().rank;
  std::vector<int64_t> bytes(static_cast<size_t>(size)), displs(static_cast<size_t>(size));
  int64_t total_rows = 0, total = 0;
  bool equal = true;
  for (int r = 0; r < size; ++r) {
    bytes[r] = batch.first_dims.at(r) * row;
    displs[r] = total;
    total += bytes[r];
    total_rows += batch.first_dims[r];
    equal = equal && batch.first_dims[r] == batch.first_dims[0];
  }
  std::vector<int64_t> out_shape = shape.empty() ? std::vector<int64_t>{total_rows} : shape.vec();
  out_shape[0] = total_rows;
  *e.result = Tensor(batch.dtype, out_shape);
  if (total > 0) {
    const void* in = on_device(e.input, ctx_.cuda().scratch());
    char* gathered =
        static_cast<char*>(ctx_.cuda().fusion_buffer().get(static_cast<size_t>(total), s));
    ncclComm_t comm = ctx_.world();  // before the group (nccl_context.h)
    if (equal) {
      NCCL_CHECK(ncclAllGather(in, gathered, static_cast<size_t>(bytes[0]), ncclUint8, comm, s));
    } else {
      NCCL_CHECK(ncclGroupStart());
      for (int r = 0; r < size; ++r) {
        if (bytes[r] == 0) continue;
        NCCL_CHECK(ncclBroadcast(r == me ? in : nullptr, gathered + displs[r],
                                 static_cast<size_t>(bytes[r]), ncclUint8, r, comm, s));
      }
      NCCL_CHECK(ncclGroupEnd());
    }
    // The result is a host Tensor (pageable): this copy returns when the gather is done.
    CUDA_CHECK(cudaMemcpyAsync(e.result->data(), gathered, static_cast<size_t>(total),
                               cudaMemcpyDeviceToHost, s));
  }
  end();
}

}  // namespace hvd::ops::nccl
