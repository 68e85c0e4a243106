// Hierarchical all-reduce over NCCL for CUDA tensors; the algorithm is described in
// hierarchical_ops.h. The batch (one tensor or many) is packed into the device fusion buffer with
// its element count padded to a multiple of local_size, because ncclReduceScatter and
// ncclAllGather need equal shards; the padding is reduced like data and never copied out. All
// three steps run in place in the fusion buffer on hvd's stream: ncclReduceScatter leaves local
// rank j's shard at offset j * shard (NCCL's in-place layout), ncclAllReduce on the cross
// communicator sums it over the nodes, ncclAllGather (in place) fills the rest.
#include "ops/cuda/kernels.h"
#include "ops/hierarchical/hierarchical_ops.h"
#include "common/logging.h"

namespace hvd::ops::hierarchical {

NcclHierarchicalAllreduce::NcclHierarchicalAllreduce(nccl::NcclContext& ctx,
                                                     cuda::Finalizer& finalizer)
    : NcclOp(ctx, finalizer), plan_(plan(ctx.mpi().topology())) {
  if (ctx_.mpi().topology().rank == 0 && !plan_.use) HVD_LOG(Debug) << "NCCL: " << plan_.reason;
}

void NcclHierarchicalAllreduce::execute(OpBatch& batch) {
  begin(batch);
  cudaStream_t s = stream();
  const auto& topo = ctx_.mpi().topology();
  int64_t n = 0;
  char* buf = static_cast<char*>(nccl::pack_fused(ctx_, batch, topo.local_size, &n));
  if (n > 0) {
    const ncclDataType_t t = nccl::nccl_type(batch.dtype);
    const ncclRedOp_t op = nccl::nccl_op(batch.reduce_op);
    const size_t shard = static_cast<size_t>(n / topo.local_size);
    char* mine = buf + shard * static_cast<size_t>(topo.local_rank) * dtype_size(batch.dtype);
    cuda::scale(batch.dtype, buf, buf, n, batch.prescale, s);
    NCCL_CHECK(ncclReduceScatter(buf, mine, shard, t, op, ctx_.local(), s));
    NCCL_CHECK(ncclAllReduce(mine, mine, shard, t, op, ctx_.cross(), s));
    NCCL_CHECK(ncclAllGather(mine, buf, shard, t, ctx_.local(), s));
    cuda::scale(batch.dtype, buf, buf, n, post_factor(batch), s);
  }
  nccl::unpack_fused(ctx_, batch, buf);
  end();
}

}  // namespace hvd::ops::hierarchical
