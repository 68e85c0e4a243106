#pragma once

// The MPI backend: every collective on CPU tensors (and on GPU tensors staged through host
// memory, by the GPU path). Each op gets only the MPI context and, where it packs tensors, the
// fusion buffer.

#include "ops/collective_op.h"
#include "ops/fusion_buffer.h"
#include "comm/mpi_context.h"

namespace hvd::ops::mpi {

class MpiOp : public CollectiveOp {
 public:
  explicit MpiOp(const comm::MpiContext& ctx) : ctx_(ctx) {}
  bool enabled(const OpBatch& batch) const override { return batch.device.kind == Device::kCPU; }

 protected:
  const comm::MpiContext& ctx_;
};

// Allreduce; float32/float64 batches are compressed to fp16/bf16 under HVD_COMPRESSION
// (ctx.compression(); allreduce.cc describes the algorithm).
class MpiAllreduce : public MpiOp {
 public:
  MpiAllreduce(const comm::MpiContext& ctx, FusionBuffer& buffer) : MpiOp(ctx), buffer_(buffer) {}
  const char* name() const override { return "mpi_allreduce"; }
  CollectiveType type() const override { return CollectiveType::kAllreduce; }
  void execute(OpBatch& batch) override;

 private:
  void execute_compressed(OpBatch& batch, DataType wire);

  FusionBuffer& buffer_;
  FusionBuffer scratch_;  // compressed path: the blocks every rank sends this rank
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

// HVD_COMPRESSION's packing, shared with the hierarchical all-reduce: where each entry of a batch
// goes in a buffer of 16-bit elements (offsets in elements, no padding), and the casts into it
// (input * factor, rounded once) and out of it (output = value * factor).
struct CompressedLayout {
  std::vector<int64_t> offsets;
  int64_t count = 0;
};
CompressedLayout compressed_layout(const OpBatch& batch);
void pack_compressed(const OpBatch& batch, DataType wire, const CompressedLayout& layout,
                     uint16_t* buf, double factor);
void unpack_compressed(OpBatch& batch, DataType wire, const CompressedLayout& layout,
                       const uint16_t* buf, double factor);

// MPI_Allreduce of `count` elements in chunks of at most comm::kMaxMpiCount; sendbuf may be MPI_IN_PLACE.
void allreduce_chunked(const comm::MpiContext& ctx, const void* sendbuf, void* recvbuf,
                       int64_t count, DataType dtype, ReduceOp op, MPI_Comm comm);

}  // namespace hvd::ops::mpi
