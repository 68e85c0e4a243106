#pragma once

// HVD_GPU_OPERATIONS=MPI: collectives on CUDA tensors through host memory. Used when NCCL is
// absent or not wanted, and when several ranks share one GPU (NCCL cannot run two ranks on one
// device). StagedOp wraps the MPI op of the same collective:
//   1. hvd's stream waits for the streams that produce the tensors (CUDA events), then copies each
//      CUDA tensor into a pinned host staging buffer, and the host waits for those copies (the MPI
//      library reads host memory, so this path synchronises by nature);
//   2. the wrapped MPI op runs on host views of the staged tensors (results of allgather, alltoall
//      and reducescatter land directly in their host Tensors);
//   3. allreduce and broadcast outputs are copied back to the device asynchronously; a completion
//      event goes to the finalizer, which completes the handles when the copies are done.
// The staging buffer is reused in stream order: the next batch's copies into it queue behind this
// batch's copies out of it, and the host synchronises before the MPI op touches it.
//
// Threading: background thread only.

#include <memory>
#include <string>

#include "ops/collective_op.h"
#include "ops/cuda/cuda_context.h"
#include "ops/cuda/finalizer.h"

namespace hvd::ops::cuda {

class StagedOp : public CollectiveOp {
 public:
  StagedOp(std::unique_ptr<CollectiveOp> inner, cuda::CudaContext& cuda,
           cuda::Finalizer& finalizer);
  const char* name() const override { return name_.c_str(); }  // "mpi_staged_allreduce"
  CollectiveType type() const override { return inner_->type(); }
  bool enabled(const OpBatch& batch) const override { return batch.device.kind == Device::kCUDA; }
  void execute(OpBatch& batch) override;

 private:
  std::unique_ptr<CollectiveOp> inner_;
  cuda::CudaContext& cuda_;
  cuda::Finalizer& finalizer_;
  std::string name_;
};

}  // namespace hvd::ops::cuda
