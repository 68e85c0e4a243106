// Hierarchical all-reduce over MPI for CPU tensors; the algorithm is described in
// hierarchical_ops.h.
//
// One tensor: the three steps run from the caller's input into its output (MPI_Reduce_scatter
// reads all of `send` before MPI_Allgatherv writes `recv`, so they may be the same memory). A
// fused batch is packed into the fusion buffer first (prescale applied while packing) and
// unpacked after (postscale applied while unpacking), as on the flat path.
// MPI counts are int: the buffer is processed in pieces of at most kMaxMpiCount elements, each
// cut into local_size shards (the first count % local_size shards one element longer).
#include <algorithm>
#include <limits>

#include "ops/dtype_math.h"
#include "ops/hierarchical/hierarchical_ops.h"
#include "ops/mpi/mpi_ops.h"
#include "runtime/logging.h"

namespace hvd::ops::hierarchical {

HierarchicalPlan plan(const mpi::MpiTopology& t) {
  return plan_hierarchical(true, t.size, t.local_size, t.cross_size, t.homogeneous);
}

MpiHierarchicalAllreduce::MpiHierarchicalAllreduce(const mpi::MpiContext& ctx, FusionBuffer& buffer)
    : ctx_(ctx), buffer_(buffer), plan_(plan(ctx.topology())) {
  if (ctx_.topology().rank == 0) {
    if (plan_.use) HVD_LOG(Info) << plan_.reason;
    else HVD_LOG(Warning) << plan_.reason;
  }
}

void MpiHierarchicalAllreduce::reduce(const void* send, void* recv, int64_t count, DataType dtype, ReduceOp op) {
  const auto& topo = ctx_.topology();
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const MPI_Datatype mt = ctx_.datatype(dtype);
  const MPI_Op mo = ctx_.op(dtype, op);
  const int64_t piece = std::min<int64_t>(mpi::kMaxMpiCount, std::numeric_limits<int>::max());
  for (int64_t done = 0; done < count;) {
    const int64_t n = std::min(count - done, piece);
    const Shards s = shard(n, topo.local_size);
    std::vector<int> counts(s.counts.begin(), s.counts.end()), displs(s.offsets.begin(), s.offsets.end());
    const int mine = counts[static_cast<size_t>(topo.local_rank)];
    char* shard_buf = static_cast<char*>(shard_.get(static_cast<size_t>(std::max<int64_t>(mine, 1) * esize)));
    const char* sp = static_cast<const char*>(send) + done * esize;
    char* rp = static_cast<char*>(recv) + done * esize;
    MPI_CHECK(MPI_Reduce_scatter(sp, shard_buf, counts.data(), mt, mo, ctx_.local()));
    mpi::allreduce_chunked(ctx_, MPI_IN_PLACE, shard_buf, mine, dtype, op, ctx_.cross());
    MPI_CHECK(MPI_Allgatherv(shard_buf, mine, mt, rp, counts.data(), displs.data(), mt, ctx_.local()));
    done += n;
  }
}

void MpiHierarchicalAllreduce::execute(OpBatch& batch) {
  const double post = post_factor(batch);
  if (batch.entries.size() == 1) {
    OpEntry& e = batch.entries[0];
    const int64_t n = e.output.num_elements();
    if (n == 0) return;
    const void* send = e.input.data();
    if (batch.prescale != 1.0) {
      scale_copy(batch.dtype, e.input.data(), e.output.data(), static_cast<size_t>(n), batch.prescale);
      send = e.output.data();
    }
    reduce(send, e.output.data(), n, batch.dtype, batch.reduce_op);
    scale_buffer(batch.dtype, e.output.data(), static_cast<size_t>(n), post);
    return;
  }
  std::vector<int64_t> sizes;
  sizes.reserve(batch.entries.size());
  for (const auto& e : batch.entries) sizes.push_back(static_cast<int64_t>(e.input.size_bytes()));
  FusionLayout layout = fusion_layout(sizes, 1);
  char* buf = static_cast<char*>(buffer_.get(static_cast<size_t>(layout.total_bytes)));
  for (size_t i = 0; i < batch.entries.size(); ++i) {
    const auto& e = batch.entries[i];
    scale_copy(batch.dtype, e.input.data(), buf + layout.offsets[i], static_cast<size_t>(e.input.num_elements()),
               batch.prescale);
  }
  const int64_t count = layout.total_bytes / static_cast<int64_t>(dtype_size(batch.dtype));
  reduce(buf, buf, count, batch.dtype, batch.reduce_op);
  for (size_t i = 0; i < batch.entries.size(); ++i) {
    auto& e = batch.entries[i];
    scale_copy(batch.dtype, buf + layout.offsets[i], e.output.data(), static_cast<size_t>(e.output.num_elements()),
               post);
  }
}

}  // namespace hvd::ops::hierarchical
