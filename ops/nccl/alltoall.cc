// Alltoall over NCCL: the row counts are exchanged first over MPI (MPI_Alltoall on the host; the
// background thread owns MPI), then the rows with one ncclSend and one ncclRecv per peer in a NCCL
// group into a device scratch buffer, then one copy into the host result Tensor.
#include "ops/nccl/nccl_ops.h"

namespace hvd::ops::nccl {

void NcclAlltoall::execute(OpBatch& batch) {
  begin(batch);
  cudaStream_t s = stream();
  OpEntry& e = batch.entries.at(0);
  const auto& shape = e.input.shape();
  const int64_t row = row_bytes(e.input);
  const int size = ctx_.mpi().topology().size;
  std::vector<int64_t> recv_rows(static_cast<size_t>(size));
  MPI_CHECK(MPI_Alltoall(e.splits.data(), 1, MPI_INT64_T, recv_rows.data(), 1, MPI_INT64_T,
                         ctx_.mpi().world()));
  int64_t total_rows = 0, recv_total = 0;
  for (int r = 0; r < size; ++r) {
    total_rows += recv_rows[r];
    recv_total += recv_rows[r] * row;
  }
  std::vector<int64_t> out_shape = shape.empty() ? std::vector<int64_t>{total_rows} : shape.vec();
  out_shape[0] = total_rows;
  *e.result = Tensor(batch.dtype, out_shape);
  const char* in = static_cast<const char*>(on_device(e.input, ctx_.cuda().scratch()));
  char* recv = static_cast<char*>(
      ctx_.cuda().fusion_buffer().get(static_cast<size_t>(recv_total > 0 ? recv_total : 1), s));
  ncclComm_t comm = ctx_.world();  // before the group (nccl_context.h)
  NCCL_CHECK(ncclGroupStart());
  int64_t soff = 0, roff = 0;
  for (int r = 0; r < size; ++r) {
    const int64_t sb = e.splits.at(r) * row, rb = recv_rows[r] * row;
    if (sb > 0) NCCL_CHECK(ncclSend(in + soff, static_cast<size_t>(sb), ncclUint8, r, comm, s));
    if (rb > 0) NCCL_CHECK(ncclRecv(recv + roff, static_cast<size_t>(rb), ncclUint8, r, comm, s));
    soff += sb;
    roff += rb;
  }
  NCCL_CHECK(ncclGroupEnd());
  if (recv_total > 0)
    CUDA_CHECK(cudaMemcpyAsync(e.result->data(), recv, static_cast<size_t>(recv_total),
                               cudaMemcpyDeviceToHost, s));
  if (e.received_splits) *e.received_splits = recv_rows;
  end();
}

}  // namespace hvd::ops::nccl
