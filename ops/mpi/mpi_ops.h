#pragma once

// The MPI backend: every collective on CPU tensors (and on GPU tensors staged through host
// memory, by the GPU path). Each op gets only the MPI context and, where it packs tensors, the
// fusion buffer.

#include "comm/mpi_context.h"
#include "common/compression.h"
#include "ops/collective_op.h"
#include "ops/fused_allreduce.h"
#include "ops/fusion_buffer.h"
#include "ops/host_memory.h"

namespace hvd::ops::mpi {

class MpiOp : public CollectiveOp {
 public:
  explicit MpiOp(const comm::MpiContext& ctx) : ctx_(ctx) {}
  bool enabled(const OpBatch& batch) const override { return batch.device.kind == Device::kCPU; }

 protected:
  const comm::MpiContext& ctx_;
};

// Allreduce: the skeleton of ops/fused_allreduce.h on host memory, reduced by MPI_Allreduce
// (allreduce_chunked); float32/float64 batches are compressed to fp16/bf16 under HVD_COMPRESSION
// (ctx.compression(); allreduce.cc describes the algorithm).
class MpiAllreduce : public FusedAllreduce<HostMemory, MpiOp> {
 public:
  // `copies`: null, or helper threads for the fusion buffer's copies (ops/copy_workers.h).
  MpiAllreduce(const comm::MpiContext& ctx, FusionBuffer& buffer, CopyWorkers* copies = nullptr)
      : FusedAllreduce(HostMemory(buffer, copies), ctx) {}
  const char* name() const override { return "mpi_allreduce"; }

 protected:
  double reduce(const void* in, void* out, int64_t count, DataType dtype, const OpBatch& batch,
                double post) override;
  DataType packed_dtype(const OpBatch& batch) const override {
    return wire_dtype(ctx_.compression(), batch.dtype);
  }
  // Compressed: the element count is padded to a multiple of the ranks (one block each).
  int64_t parts(const OpBatch& batch, DataType packed) const override {
    return packed != batch.dtype ? ctx_.topology().size : 1;
  }

 private:
  void reduce_compressed(uint16_t* buf, int64_t count, DataType wire, const OpBatch& batch);
  void reduce_in_rank_order(const void* in, void* out, int64_t count, DataType dtype, ReduceOp op);

  FusionBuffer
      scratch_;  // compressed and deterministic paths: the blocks every rank sends this one
};

class MpiAllgather : public MpiOp {
 public:
  using MpiOp::MpiOp;
  const char* name() const override { return "mpi_allgather"; }
  CollectiveType type() const override { return CollectiveType::kAllgather; }
  void execute(OpBatch& batch) override;
};

class MpiBroadcast : public MpiOp {
 public:
  using MpiOp::MpiOp;
  const char* name() const override { return "mpi_broadcast"; }
  CollectiveType type() const override { return CollectiveType::kBroadcast; }
  void execute(OpBatch& batch) override;
};

class MpiAlltoall : public MpiOp {
 public:
  using MpiOp::MpiOp;
  const char* name() const override { return "mpi_alltoall"; }
  CollectiveType type() const override { return CollectiveType::kAlltoall; }
  void execute(OpBatch& batch) override;
};

// One send or its receive, by the two ranks of the batch (root sends, peer receives; the executor
// runs it on those two only): the bytes of the entry's tensor, in chunks of at most 1 GiB. The
// runtime has checked that both ends agree on dtype and shape.
class MpiSendRecv : public MpiOp {
 public:
  using MpiOp::MpiOp;
  const char* name() const override { return "mpi_sendrecv"; }
  CollectiveType type() const override { return CollectiveType::kSendRecv; }
  void execute(OpBatch& batch) override;
};

class MpiReducescatter : public MpiOp {
 public:
  MpiReducescatter(const comm::MpiContext& ctx, FusionBuffer& buffer)
      : MpiOp(ctx), buffer_(buffer) {}
  const char* name() const override { return "mpi_reducescatter"; }
  CollectiveType type() const override { return CollectiveType::kReducescatter; }
  void execute(OpBatch& batch) override;

 private:
  FusionBuffer& buffer_;
};

// MPI_Allreduce of `count` elements in chunks of at most comm::kMaxMpiCount; sendbuf may be
// MPI_IN_PLACE.
void allreduce_chunked(const comm::MpiContext& ctx, const void* sendbuf, void* recvbuf,
                       int64_t count, DataType dtype, ReduceOp op, MPI_Comm comm);

}  // namespace hvd::ops::mpi
