// Hierarchical all-reduce over MPI for CPU tensors; the algorithm is described in
// hierarchical_ops.h.
//
// A single tensor is reduced in place in its output (copied there first, prescaled, when it is not
// already in place); a fused batch in the fusion buffer (prescale applied while packing, postscale
// while unpacking), as on the flat path. The rings use MPI_BYTE messages of at most 1 MiB, so no
// MPI count limit applies.
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

namespace {

constexpr int kRingTag = 0x4876;             // "Hv": only this file's rings use it, on local/cross
constexpr int64_t kSegmentBytes = 1 << 20;  // pipelining unit of one block transfer

// The segments of a block of `bytes`: both ends of a transfer cut it the same way, so each
// segment is one message.
int64_t num_segments(int64_t bytes) { return bytes == 0 ? 0 : (bytes + kSegmentBytes - 1) / kSegmentBytes; }

}  // namespace

// One step of a ring: send block `send_off/send_bytes` to `right` while receiving a block of
// `recv_bytes` from `left`, segment by segment. With `reduce`, each received segment is reduced
// into buf at `recv_off` as soon as it arrives (two scratch segments, so the next segment arrives
// while this one is reduced); without, it is received in place.
void MpiHierarchicalAllreduce::ring_step(char* buf, int64_t send_off, int64_t send_bytes, int64_t recv_off,
                                         int64_t recv_bytes, bool reduce, DataType dtype, ReduceOp op, int left,
                                         int right, MPI_Comm comm) {
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const int64_t ns = num_segments(send_bytes), nr = num_segments(recv_bytes);
  sends_.assign(static_cast<size_t>(ns), MPI_REQUEST_NULL);
  for (int64_t i = 0; i < ns; ++i) {
    const int64_t b = std::min(kSegmentBytes, send_bytes - i * kSegmentBytes);
    MPI_CHECK(MPI_Isend(buf + send_off + i * kSegmentBytes, static_cast<int>(b), MPI_BYTE, right, kRingTag, comm,
                        &sends_[static_cast<size_t>(i)]));
  }
  char* scratch = reduce ? static_cast<char*>(scratch_.get(static_cast<size_t>(2 * kSegmentBytes))) : nullptr;
  auto seg_bytes = [&](int64_t i) { return std::min(kSegmentBytes, recv_bytes - i * kSegmentBytes); };
  auto post = [&](int64_t i, MPI_Request* r) {
    char* dst = reduce ? scratch + (i % 2) * kSegmentBytes : buf + recv_off + i * kSegmentBytes;
    MPI_CHECK(MPI_Irecv(dst, static_cast<int>(seg_bytes(i)), MPI_BYTE, left, kRingTag, comm, r));
  };
  MPI_Request recv[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  for (int64_t i = 0; i < std::min<int64_t>(nr, 2); ++i) post(i, &recv[i]);
  for (int64_t i = 0; i < nr; ++i) {
    MPI_CHECK(MPI_Wait(&recv[i % 2], MPI_STATUS_IGNORE));
    if (reduce) {
      reduce_buffers(dtype, op, scratch + (i % 2) * kSegmentBytes, buf + recv_off + i * kSegmentBytes,
                     static_cast<size_t>(seg_bytes(i) / esize));
    }
    if (i + 2 < nr) post(i + 2, &recv[i % 2]);
  }
  if (ns > 0) MPI_CHECK(MPI_Waitall(static_cast<int>(ns), sends_.data(), MPI_STATUSES_IGNORE));
}

// Ring reduce-scatter (reduce=true) or all-gather (reduce=false) of the blocks `s` of buf over
// `comm` (rank `me` of `p`). Reduce-scatter: at step k rank r sends block r-k-1 and reduces the
// block r-k-2 it receives, so after p-1 steps it holds the full reduction of block r, computed
// once, by one rank: every rank ends with bitwise the same values. All-gather: at step k rank r
// forwards block r-k and receives block r-k-1.
void MpiHierarchicalAllreduce::ring(char* buf, const Shards& s, bool reduce, DataType dtype, ReduceOp op, int me,
                                    int p, MPI_Comm comm) {
  if (p < 2) return;
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const int left = (me + p - 1) % p, right = (me + 1) % p;
  auto mod = [p](int v) { return static_cast<size_t>(((v % p) + p) % p); };
  for (int k = 0; k < p - 1; ++k) {
    const size_t sb = reduce ? mod(me - k - 1) : mod(me - k);
    const size_t rb = reduce ? mod(me - k - 2) : mod(me - k - 1);
    ring_step(buf, s.offsets[sb] * esize, s.counts[sb] * esize, s.offsets[rb] * esize, s.counts[rb] * esize, reduce,
              dtype, op, left, right, comm);
  }
}

// The three steps, in place on `count` elements of buf: ring reduce-scatter in the node (each
// local rank ends with the node's sum of its shard), ring all-reduce of that shard across nodes
// (reduce-scatter and all-gather of sub-shards among the ranks of this local rank), ring
// all-gather in the node. Hand-written rings, not MPI_Reduce_scatter/MPI_Allreduce: they move
// the minimum (each rank sends (p-1)/p of its data per phase), pipeline transfers with the
// reduction in 1 MiB segments, and give identical bits on every rank.
void MpiHierarchicalAllreduce::reduce(char* buf, int64_t count, DataType dtype, ReduceOp op) {
  const auto& topo = ctx_.topology();
  const Shards local = shard(count, topo.local_size);
  const size_t mine = static_cast<size_t>(topo.local_rank);
  ring(buf, local, true, dtype, op, topo.local_rank, topo.local_size, ctx_.local());
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  char* shard_buf = buf + local.offsets[mine] * esize;
  const Shards cross = shard(local.counts[mine], topo.cross_size);
  ring(shard_buf, cross, true, dtype, op, topo.cross_rank, topo.cross_size, ctx_.cross());
  ring(shard_buf, cross, false, dtype, op, topo.cross_rank, topo.cross_size, ctx_.cross());
  ring(buf, local, false, dtype, op, topo.local_rank, topo.local_size, ctx_.local());
}

void MpiHierarchicalAllreduce::execute(OpBatch& batch) {
  const double post = post_factor(batch);
  if (batch.entries.size() == 1) {
    OpEntry& e = batch.entries[0];
    const int64_t n = e.output.num_elements();
    if (n == 0) return;
    if (batch.prescale != 1.0 || e.input.data() != e.output.data()) {
      scale_copy(batch.dtype, e.input.data(), e.output.data(), static_cast<size_t>(n), batch.prescale);
    }
    reduce(static_cast<char*>(e.output.data()), n, batch.dtype, batch.reduce_op);
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
  reduce(buf, count, batch.dtype, batch.reduce_op);
  for (size_t i = 0; i < batch.entries.size(); ++i) {
    auto& e = batch.entries[i];
    scale_copy(batch.dtype, buf + layout.offsets[i], e.output.data(), static_cast<size_t>(e.output.num_elements()),
               post);
  }
}

}  // namespace hvd::ops::hierarchical
