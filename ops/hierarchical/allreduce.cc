// Hierarchical all-reduce over MPI for CPU tensors; the algorithm is described in
// hierarchical_ops.h.
//
// The skeleton is ops/fused_allreduce.h's: a single tensor is reduced in place in its output
// (copied there first, prescaled, when it is not already in place); a fused batch in the fusion
// buffer (prescale applied while packing, postscale while unpacking), as on the flat path. The
// rings use MPI_BYTE messages of at most 1 MiB, so no MPI count limit applies.
//
// HVD_COMPRESSION: the batch is cast into the fusion buffer as fp16/bf16 (prescale folded in), the
// rings run on the 16-bit values (each ring step reduces in float and rounds to 16 bits, as on the
// NCCL path), and the result is cast back with the postscale (and 1/contributors) folded in. The
// flat path rounds once instead (ops/mpi/allreduce.cc); the rings cannot, as partial sums travel
// between ranks.
#include <algorithm>
#include <chrono>
#include <limits>
#include <memory>

#include "common/backoff.h"
#include "common/dtype_math.h"
#include "common/logging.h"
#include "ops/hierarchical/hierarchical_ops.h"

namespace hvd::ops::hierarchical {

HierarchicalPlan plan(const comm::MpiTopology& t) {
  return plan_hierarchical(true, t.size, t.local_size, t.cross_size, t.homogeneous);
}

MpiHierarchicalAllreduce::MpiHierarchicalAllreduce(const comm::MpiContext& ctx,
                                                   FusionBuffer& buffer, CopyWorkers* copies)
    : FusedAllreduce(HostMemory(buffer, copies)), ctx_(ctx), plan_(plan(ctx.topology())) {
  if (ctx_.topology().rank == 0) {
    if (plan_.use)
      HVD_LOG(Info) << plan_.reason;
    else
      HVD_LOG(Warning) << plan_.reason;
  }
}

namespace {

constexpr int64_t kSegmentBytes = 1 << 20;  // unit of one message: a block goes in segments
constexpr int64_t kChunkBytes = 8 << 20;    // pipelining unit of the whole algorithm
constexpr int kMaxChunks = 16;
// One tag per phase, so that the in-node reduce-scatter of one chunk and the in-node all-gather of
// another, which run at the same time on the same communicator, never take each other's messages.
constexpr int kTagLocalReduceScatter = 0x4871, kTagCross = 0x4872, kTagLocalAllgather = 0x4873;

int64_t num_segments(int64_t bytes) {
  return bytes == 0 ? 0 : (bytes + kSegmentBytes - 1) / kSegmentBytes;
}

// One exchange of a ring: send one block to the right neighbour while receiving one from the left
// (byte offsets into the op's buffer), reducing what arrives or storing it.
struct RingStep {
  int64_t send_off, send_bytes, recv_off, recv_bytes;
  bool reduce;
};

// Ring reduce-scatter (reduce) or all-gather steps over the blocks `s` (element offsets, relative
// to `base` bytes) for rank `me` of `p`. Reduce-scatter: at step k rank r sends block r-k-1 and
// reduces the block r-k-2 it receives, so after p-1 steps it holds the full reduction of block r,
// computed once, by one rank: every rank ends with the same bits. All-gather: at step k rank r
// forwards block r-k and receives block r-k-1.
void add_ring(std::vector<RingStep>& out, const Shards& s, int64_t base, int64_t esize, bool reduce,
              int me, int p) {
  auto mod = [p](int v) { return static_cast<size_t>(((v % p) + p) % p); };
  for (int k = 0; k < p - 1; ++k) {
    const size_t sb = reduce ? mod(me - k - 1) : mod(me - k);
    const size_t rb = reduce ? mod(me - k - 2) : mod(me - k - 1);
    out.push_back({base + s.offsets[sb] * esize, s.counts[sb] * esize, base + s.offsets[rb] * esize,
                   s.counts[rb] * esize, reduce});
  }
}

}  // namespace

// A sequence of ring steps run without blocking, so that several (the phases of different chunks)
// progress together: poll() does whatever is possible now and returns.
class MpiHierarchicalAllreduce::RingOp {
 public:
  RingOp(char* buf, std::vector<RingStep> steps, DataType dtype, ReduceOp op, int left, int right,
         MPI_Comm comm, int tag, FusionBuffer* scratch)
      : buf_(buf),
        steps_(std::move(steps)),
        dtype_(dtype),
        op_(op),
        left_(left),
        right_(right),
        comm_(comm),
        tag_(tag),
        scratch_(scratch) {
    start();
  }
  bool done() const { return step_ >= steps_.size(); }

  void poll() {
    while (!done()) {
      const RingStep& st = steps_[step_];
      const int64_t nr = num_segments(st.recv_bytes);
      while (received_ < nr) {
        int flag = 0;
        MPI_CHECK(MPI_Test(&recv_[received_ % 2], &flag, MPI_STATUS_IGNORE));
        if (!flag) return;
        if (st.reduce) {
          const int64_t b = std::min(kSegmentBytes, st.recv_bytes - received_ * kSegmentBytes);
          reduce_buffers(dtype_, op_, scratch_ptr() + (received_ % 2) * kSegmentBytes,
                         buf_ + st.recv_off + received_ * kSegmentBytes,
                         static_cast<size_t>(b / static_cast<int64_t>(dtype_size(dtype_))));
        }
        if (received_ + 2 < nr) post_recv(received_ + 2);
        ++received_;
      }
      int all = 0;
      MPI_CHECK(
          MPI_Testall(static_cast<int>(sends_.size()), sends_.data(), &all, MPI_STATUSES_IGNORE));
      if (!all) return;
      ++step_;
      start();
    }
  }

 private:
  char* scratch_ptr() {
    return static_cast<char*>(scratch_->get(static_cast<size_t>(2 * kSegmentBytes)));
  }

  void post_recv(int64_t i) {
    const RingStep& st = steps_[step_];
    const int64_t b = std::min(kSegmentBytes, st.recv_bytes - i * kSegmentBytes);
    char* dst = st.reduce ? scratch_ptr() + (i % 2) * kSegmentBytes
                          : buf_ + st.recv_off + i * kSegmentBytes;
    MPI_CHECK(MPI_Irecv(dst, static_cast<int>(b), MPI_BYTE, left_, tag_, comm_, &recv_[i % 2]));
  }

  void start() {
    received_ = 0;
    sends_.clear();
    if (done()) return;
    const RingStep& st = steps_[step_];
    const int64_t ns = num_segments(st.send_bytes), nr = num_segments(st.recv_bytes);
    for (int64_t i = 0; i < std::min<int64_t>(nr, 2); ++i) post_recv(i);
    sends_.assign(static_cast<size_t>(ns), MPI_REQUEST_NULL);
    for (int64_t i = 0; i < ns; ++i) {
      const int64_t b = std::min(kSegmentBytes, st.send_bytes - i * kSegmentBytes);
      MPI_CHECK(MPI_Isend(buf_ + st.send_off + i * kSegmentBytes, static_cast<int>(b), MPI_BYTE,
                          right_, tag_, comm_, &sends_[static_cast<size_t>(i)]));
    }
  }

  char* buf_;
  std::vector<RingStep> steps_;
  DataType dtype_;
  ReduceOp op_;
  int left_, right_;
  MPI_Comm comm_;
  int tag_;
  FusionBuffer* scratch_;  // two received segments waiting to be reduced (null: never reduces)
  size_t step_ = 0;
  int64_t received_ = 0;
  MPI_Request recv_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  std::vector<MPI_Request> sends_;
};

// The three steps, in place on `count` elements of buf, as hand-written rings (not
// MPI_Reduce_scatter/MPI_Allreduce: they move the minimum, each rank sending (p-1)/p of its data
// per phase, and give identical bits on every rank):
//   1. ring reduce-scatter in the node: each local rank ends with the node's sum of its shard;
//   2. ring reduce-scatter + all-gather of that shard across nodes, among the ranks of this local
//      rank: the shard becomes the global sum;
//   3. ring all-gather in the node.
// Pipelined: the buffer is cut into chunks of ~8 MiB and at each stage the in-node reduce-scatter
// of chunk c, the cross-node phase of chunk c-1 and the in-node all-gather of chunk c-2 progress
// together, so the in-node passes (memory) overlap the cross-node one (network).
void MpiHierarchicalAllreduce::rings(char* buf, int64_t count, DataType dtype, ReduceOp op) {
  const auto& topo = ctx_.topology();
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  const int lp = topo.local_size, lr = topo.local_rank, cp = topo.cross_size, cr = topo.cross_rank;
  const int chunks =
      static_cast<int>(std::clamp<int64_t>(count * esize / kChunkBytes, 1, kMaxChunks));
  const Shards chunk = shard(count, chunks);

  auto local_op = [&](int c, bool reduce_scatter) {
    std::vector<RingStep> steps;
    const Shards s = shard(chunk.counts[static_cast<size_t>(c)], lp);
    add_ring(steps, s, chunk.offsets[static_cast<size_t>(c)] * esize, esize, reduce_scatter, lr,
             lp);
    return std::make_unique<RingOp>(buf, std::move(steps), dtype, op, (lr + lp - 1) % lp,
                                    (lr + 1) % lp, ctx_.local(),
                                    reduce_scatter ? kTagLocalReduceScatter : kTagLocalAllgather,
                                    reduce_scatter ? &scratch_rs_ : nullptr);
  };
  auto cross_op = [&](int c) {
    std::vector<RingStep> steps;
    const Shards s = shard(chunk.counts[static_cast<size_t>(c)], lp);
    const int64_t mine = chunk.offsets[static_cast<size_t>(c)] + s.offsets[static_cast<size_t>(lr)];
    const Shards sub = shard(s.counts[static_cast<size_t>(lr)], cp);
    add_ring(steps, sub, mine * esize, esize, true, cr, cp);
    add_ring(steps, sub, mine * esize, esize, false, cr, cp);
    return std::make_unique<RingOp>(buf, std::move(steps), dtype, op, (cr + cp - 1) % cp,
                                    (cr + 1) % cp, ctx_.cross(), kTagCross, &scratch_cross_);
  };

  for (int stage = 0; stage < chunks + 2; ++stage) {
    std::vector<std::unique_ptr<RingOp>> ops;
    if (stage < chunks) ops.push_back(local_op(stage, true));
    if (stage - 1 >= 0 && stage - 1 < chunks) ops.push_back(cross_op(stage - 1));
    if (stage - 2 >= 0) ops.push_back(local_op(stage - 2, false));
    // Spin briefly, then give the core away: ranks share cores with each other and with the
    // kernel's network processing (and, in a trainer, with compute threads).
    Backoff backoff(std::chrono::microseconds(20));
    for (;;) {
      bool all = true;
      for (auto& o : ops) {
        o->poll();
        all = all && o->done();
      }
      if (all) break;
      backoff.pause();
    }
  }
}

double MpiHierarchicalAllreduce::reduce(const void* in, void* out, int64_t count, DataType dtype,
                                        const OpBatch& batch, double post) {
  scale_copy(dtype, in, out, static_cast<size_t>(count), 1.0);  // in place: nothing
  rings(static_cast<char*>(out), count, dtype, batch.reduce_op);
  return post;
}

}  // namespace hvd::ops::hierarchical
