// Hierarchical all-reduce over NCCL for CUDA tensors; the algorithm is described in
// hierarchical_ops.h. The skeleton of ops/fused_allreduce.h on device memory: the batch (one tensor
// or many) is packed into the device fusion buffer (prescaled) with its element count padded to a
// multiple of local_size, because ncclReduceScatter and ncclAllGather need equal shards; the
// padding is reduced like data and never copied out. All three steps run in place in the fusion
// buffer on hvd's stream: ncclReduceScatter leaves local rank j's shard at offset j * shard
// (NCCL's in-place layout), ncclAllReduce on the cross communicator sums it over the nodes,
// ncclAllGather (in place) fills the rest.
#include "ops/hierarchical/hierarchical_ops.h"
#include "common/logging.h"

namespace hvd::ops::hierarchical {

NcclHierarchicalAllreduce::NcclHierarchicalAllreduce(nccl::NcclContext& ctx,
                                                     cuda::Finalizer& finalizer)
    : FusedAllreduce(cuda::DeviceMemory(ctx.cuda()), ctx, finalizer),
      plan_(plan(ctx.mpi().topology())) {
  if (ctx_.mpi().topology().rank == 0 && !plan_.use) HVD_LOG(Debug) << "NCCL: " << plan_.reason;
}

void NcclHierarchicalAllreduce::execute(OpBatch& batch) {
  begin(batch);
  FusedAllreduce::execute(batch);
  end();
}

int64_t NcclHierarchicalAllreduce::parts(const OpBatch&, DataType) const {
  return ctx_.mpi().topology().local_size;
}

double NcclHierarchicalAllreduce::reduce(const void* /*in: == out*/, void* out, int64_t count,
                                         DataType dtype, const OpBatch& batch, double post) {
  cudaStream_t s = stream();
  const auto& topo = ctx_.mpi().topology();
  char* buf = static_cast<char*>(out);
  const ncclDataType_t t = nccl::nccl_type(dtype);
  const ncclRedOp_t op = nccl::nccl_op(batch.reduce_op);
  const size_t shard = static_cast<size_t>(count / topo.local_size);
  char* mine = buf + shard * static_cast<size_t>(topo.local_rank) * dtype_size(dtype);
  NCCL_CHECK(ncclReduceScatter(buf, mine, shard, t, op, ctx_.local(), s));
  NCCL_CHECK(ncclAllReduce(mine, mine, shard, t, op, ctx_.cross(), s));
  NCCL_CHECK(ncclAllGather(mine, buf, shard, t, ctx_.local(), s));
  return post;
}

}  // namespace hvd::ops::hierarchical
