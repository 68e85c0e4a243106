#pragma once

// The data-plane ops in their order of preference, in one place. OperationManager runs a batch on
// the first registered op of its collective whose enabled() accepts it, so the order below is the
// policy:
//   1. GPU tensors, NCCL (when the GpuBackend has NCCL: HVD_GPU_OPERATIONS=NCCL and no rank shares
//      a GPU): the hierarchical all-reduce first with HVD_HIERARCHICAL_ALLREDUCE (it declines
//      unless several homogeneous nodes), then allreduce, allgather, broadcast, alltoall,
//      reducescatter;
//   2. GPU tensors, host-staged MPI (every collective and send/recv; the only GPU path without
//      NCCL, and the path of every process set but the global one);
//   3. CPU tensors: the hierarchical MPI all-reduce with HVD_HIERARCHICAL_ALLREDUCE (it declines,
//      with a log line on rank 0, on one node or on nodes with different numbers of ranks);
//   4. CPU tensors: plain MPI (every collective, and send/recv).
// Without CUDA in the build, or without a device, 1 and 2 are absent (a GPU tensor then finds no
// op and fails with OperationManager's message).
//
// Threading: called once at init, on the user thread; the ops are then used by the background
// thread only.

#include "comm/mpi_context.h"
#include "ops/copy_workers.h"
#include "ops/fusion_buffer.h"
#include "ops/gpu_backend.h"
#include "ops/operation_manager.h"

namespace hvd::ops {

struct OperationsOptions {
  bool hierarchical_allreduce = false;  // HVD_HIERARCHICAL_ALLREDUCE
  bool nccl_fp16_compression = false;   // HVD_COMPRESSION=fp16 (the NCCL all-reduce)
  CopyWorkers* host_copies = nullptr;   // HVD_COPY_THREADS: helpers of the host all-reduces' copies
  // The NCCL communicators of the set these ops serve (GpuBackend::nccl() for the global set,
  // set_nccl() for another); null: CUDA tensors go through host-staged MPI.
  nccl::NcclContext* nccl = nullptr;
};

// The ops keep references to `mpi`, `host_fusion`, `options.host_copies` and `gpu`'s contexts:
// those must outlive the returned manager (and gpu.shutdown() must come after its last use).
OperationManager make_operations(const comm::MpiContext& mpi, FusionBuffer& host_fusion,
                                 const GpuBackend& gpu, const OperationsOptions& options);

}  // namespace hvd::ops
