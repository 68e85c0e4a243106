#pragma once

// The hierarchical all-reduce (HVD_HIERARCHICAL_ALLREDUCE=1): for a job of several nodes with the
// same number of ranks on each, a reduce-scatter inside the node leaves each local rank with the
// node's sum of one shard; an all-reduce of that shard across nodes, among the ranks of the same
// local rank (the cross communicator), makes it the global sum; an all-gather inside the node
// gives every rank the whole result. Only 1/local_size of the data crosses the (slow) network
// from each rank, and the in-node steps use the fast links.
//
// Why it is correct: the shards partition the buffer (ops/hierarchical/shards.h), every node cuts
// it the same way (same count, same local_size: homogeneous), so local rank j on every node holds
// the node sum of the same shard j, and summing those across nodes sums over every rank.
//
// The op decides at construction whether it applies (plan(): several nodes, several ranks per
// node, homogeneous) and logs the decision once on rank 0; when it does not apply, enabled() is
// false and the operation manager falls through to the flat all-reduce registered after it.
// Two implementations: MPI for CPU tensors (always built), NCCL for CUDA tensors (with NCCL).

#include <vector>

#include "hvd/config.h"
#include "comm/mpi_context.h"
#include "common/compression.h"
#include "ops/collective_op.h"
#include "ops/fused_allreduce.h"
#include "ops/fusion_buffer.h"
#include "ops/hierarchical/shards.h"
#include "ops/host_memory.h"

#if HVD_HAVE_NCCL
#include "ops/cuda/device_memory.h"
#include "ops/nccl/nccl_ops.h"
#endif

namespace hvd::ops::hierarchical {

// The plan for this process's topology (logs nothing).
HierarchicalPlan plan(const comm::MpiTopology& topology);

// The skeleton of ops/fused_allreduce.h on host memory; HVD_COMPRESSION packs fp16/bf16 and the
// rings run on the 16-bit values.
class MpiHierarchicalAllreduce : public FusedAllreduce<HostMemory> {
 public:
  // Logs the plan's reason on rank 0 (info when on, warning when the request is ignored).
  MpiHierarchicalAllreduce(const comm::MpiContext& ctx, FusionBuffer& buffer,
                           CopyWorkers* copies = nullptr);
  const char* name() const override { return "mpi_hierarchical_allreduce"; }
  bool enabled(const OpBatch& batch) const override {
    return plan_.use && batch.device.kind == Device::kCPU && !batch.deterministic;
  }

 protected:
  double reduce(const void* in, void* out, int64_t count, DataType dtype, const OpBatch& batch,
                double post) override;
  DataType packed_dtype(const OpBatch& batch) const override {
    return wire_dtype(ctx_.compression(), batch.dtype);
  }

 private:
  class RingOp;  // allreduce.cc
  // The three steps, in place on `count` contiguous elements of buf (pipelined by chunks).
  void rings(char* buf, int64_t count, DataType dtype, ReduceOp op);

  const comm::MpiContext& ctx_;
  // Per reducing phase (they run at the same time): two received segments waiting to be
  // reduced. The all-gather receives in place.
  FusionBuffer scratch_rs_, scratch_cross_;
  HierarchicalPlan plan_;
};

#if HVD_HAVE_NCCL
// The skeleton of ops/fused_allreduce.h on device memory; every batch goes through the fusion
// buffer, padded to a multiple of local_size (ncclReduceScatter and ncclAllGather need equal
// shards). Readiness, completion and device checks as every NCCL op (ops/nccl/nccl_ops.h).
class NcclHierarchicalAllreduce : public FusedAllreduce<cuda::DeviceMemory, nccl::NcclOp> {
 public:
  NcclHierarchicalAllreduce(nccl::NcclContext& ctx, cuda::Finalizer& finalizer);
  const char* name() const override { return "nccl_hierarchical_allreduce"; }
  bool enabled(const OpBatch& batch) const override {
    return plan_.use && batch.device.kind == Device::kCUDA && !batch.deterministic;
  }
  void execute(OpBatch& batch) override;

 protected:
  double reduce(const void* in, void* out, int64_t count, DataType dtype, const OpBatch& batch,
                double post) override;
  bool reduce_directly(const OpBatch&) const override { return false; }
  int64_t parts(const OpBatch&, DataType) const override;

 private:
  HierarchicalPlan plan_;
};
#endif

}  // namespace hvd::ops::hierarchical
