#pragma once

// The GPU backends as one unit the runtime owns: the CUDA context, the NCCL communicators, the
// finalizer and the GPU ops, built from a few options and registered with the operation manager
// in the documented order. The header has no CUDA types, so runtime.cc uses it unchanged in every
// build; without CUDA (HVD_HAVE_CUDA 0) or without a device it registers nothing and finish()
// completes at once.
//
// Order of registration (first enabled op wins, ops/operation_manager.h):
//   1. NCCL (unless HVD_GPU_OPERATIONS=MPI or some rank shares a GPU): the hierarchical all-reduce
//      first (it declines unless several homogeneous nodes), then allreduce, allgather, broadcast,
//      alltoall, reducescatter;
//   2. host-staged MPI for CUDA tensors (every collective).
// The runtime then registers the CPU ops (hierarchical MPI all-reduce, then plain MPI).
//
// Threading: constructed and shut down on the user thread that runs init()/shutdown() (no
// collective call in either); register_ops() at init; finish() and discard_pending() on the
// background thread; completion callbacks run on the finalizer thread.

#include <functional>
#include <memory>
#include <string>

#include "ops/collective_op.h"
#include "ops/fusion_buffer.h"
#include "comm/mpi_context.h"
#include "ops/operation_manager.h"

namespace hvd::ops {

struct GpuBackendOptions {
  int device = -1;       // cluster::GpuAssignment::device; -1: no GPU path
  bool use_nccl = true;  // HVD_GPU_OPERATIONS=NCCL and no rank shares a GPU (agree on it over MPI!)
  bool hierarchical = false;      // HVD_HIERARCHICAL_ALLREDUCE
  bool fp16_compression = false;  // HVD_COMPRESSION=fp16
};

class GpuBackend {
 public:
  GpuBackend(const comm::MpiContext& mpi, FusionBuffer& host_fusion,
             const GpuBackendOptions& options);
  ~GpuBackend();
  GpuBackend(const GpuBackend&) = delete;
  GpuBackend& operator=(const GpuBackend&) = delete;

  // cudaGetDeviceCount, 0 without CUDA, a driver or a device. Never throws.
  static int visible_devices();
  // Whether GPU ops exist (a CUDA build and a device).
  bool active() const;

  void register_ops(OperationManager& manager);

  // After OperationManager::execute(batch) returned normally: runs done("") or done(error) once
  // the batch's GPU work completed (on the finalizer thread), or here and now for a batch that
  // left no GPU work pending.
  void finish(std::function<void(const std::string& error)> done);
  // After OperationManager::execute(batch) threw.
  void discard_pending();

  // Waits for every pending batch and runs its callback, then frees the NCCL communicators and
  // the CUDA resources. Call after the background thread stopped, before MPI is finalised.
  // Idempotent; the destructor calls it.
  void shutdown();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace hvd::ops
