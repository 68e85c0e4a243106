#pragma once

// The GPU backends' resources as one unit the runtime owns: the CUDA context, the NCCL
// communicators and the finalizer. The ops that use them are built by ops/backends.h
// (make_operations(), the one place that says the preference order). The header has no CUDA
// types, so runtime.cc uses it unchanged in every build; without CUDA (HVD_HAVE_CUDA 0) or
// without a device it holds nothing and finish() completes at once.
//
// Threading: constructed and shut down on the user thread that runs init()/shutdown() (no
// collective call in either); finish() and discard_pending() on the thread that runs the batch
// (the background thread, or a one-rank job's user thread with HVD_SINGLE_RANK_INLINE_GPU, under
// the runtime's execution lock either way); completion callbacks run on the finalizer thread.

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/mpi_context.h"

namespace hvd::ops {

namespace cuda {
class CudaContext;
class Finalizer;
}  // namespace cuda
namespace nccl {
class NcclContext;
}  // namespace nccl

struct GpuBackendOptions {
  int device = -1;       // cluster::GpuAssignment::device; -1: no GPU path
  bool use_nccl = true;  // HVD_GPU_OPERATIONS=NCCL and no rank shares a GPU (agree on it over MPI!)
  // How long the finalizer polls for the next batch after completing one before it sleeps
  // (HVD_WAIT_POLL_US; auto asks for three cores per rank: common/backoff.h). 0: never.
  int64_t finalizer_poll_us = 0;
  // HVD_ENABLE_ASYNC_COMPLETION: finish_ordered() completes at once, ordered on the outputs'
  // streams, instead of when the GPU work is done.
  bool async_completion = false;
};

class GpuBackend {
 public:
  GpuBackend(const comm::MpiContext& mpi, const GpuBackendOptions& options);
  ~GpuBackend();
  GpuBackend(const GpuBackend&) = delete;
  GpuBackend& operator=(const GpuBackend&) = delete;

  // cudaGetDeviceCount, 0 without CUDA, a driver or a device. Never throws.
  static int visible_devices();
  // ncclGetVersion's code (major * 10000 + minor * 100 + patch: 2.30.1 is 23001), 0 without NCCL.
  // Never throws.
  static int nccl_version();
  // Whether GPU ops exist (a CUDA build and a device).
  bool active() const;

  // The calling thread's current CUDA device (-1 without CUDA or on error), and setting it back
  // (nothing for -1). A one-rank job's device operation may run on the user's thread
  // (runtime/runtime.cc, Runtime::runs_inline), where the op makes hvd's device current; the
  // runtime gives the user's choice back after. Never throw.
  static int current_device();
  static void set_current_device(int device);

  // The contexts the GPU ops use (ops/backends.cc): null when not active() (and NCCL's when
  // !use_nccl). Owned here; valid until shutdown().
  cuda::CudaContext* cuda() const;
  nccl::NcclContext* nccl() const;
  cuda::Finalizer* finalizer() const;
  // NCCL communicators on a process set's MPI communicators (`mpi`, which must outlive them),
  // created on first use like nccl()'s; null when nccl() is. Owned here, under the set's id, until
  // drop_set_nccl(id) (the set is removed) or shutdown(). Background thread.
  nccl::NcclContext* set_nccl(int id, const comm::MpiContext& mpi);
  void drop_set_nccl(int id);

  // After OperationManager::execute(batch) returned normally: runs done("") or done(error) once
  // the batch's GPU work completed (on the finalizer thread), or here and now for a batch that
  // left no GPU work pending.
  void finish(std::function<void(const std::string& error)> done);
  // Whether finish_ordered() may complete before the GPU work is done (HVD_ENABLE_ASYNC_COMPLETION
  // and a GPU path).
  bool async_completion() const;
  // finish(), for a batch whose outputs are all device tensors (an all-reduce or a broadcast):
  // with async_completion(), `streams` (the outputs' TensorRef streams) wait for the batch's work
  // and done("") runs here and now; a GPU error seen later is logged. Otherwise finish(done).
  void finish_ordered(const std::vector<void*>& streams,
                      std::function<void(const std::string& error)> done, std::string what);
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
