#include "ops/backends.h"

#include <memory>

#include "hvd/config.h"
#include "ops/hierarchical/hierarchical_ops.h"
#include "ops/mpi/mpi_ops.h"

#if HVD_HAVE_CUDA
#include "ops/cuda/finalizer.h"
#include "ops/cuda/staged.h"
#include "ops/nccl/nccl_ops.h"
#endif

namespace hvd::ops {
namespace {

#if HVD_HAVE_CUDA
// 1 and 2 of the order (backends.h).
void add_gpu_ops(OperationManager& m, const comm::MpiContext& mpi, FusionBuffer& host_fusion,
                 const GpuBackend& gpu, const OperationsOptions& options) {
  CopyWorkers* copies = options.host_copies;
  cuda::Finalizer& fin = *gpu.finalizer();
  nccl::NcclContext* nccl = options.nccl;
  if (nccl) {
    if (options.hierarchical_allreduce)
      m.add(std::make_unique<hierarchical::NcclHierarchicalAllreduce>(*nccl, fin));
    nccl::NcclAllreduceOptions o;
    o.fp16_compression = options.nccl_fp16_compression;
    m.add(std::make_unique<nccl::NcclAllreduce>(*nccl, fin, o));
    m.add(std::make_unique<nccl::NcclAllgather>(*nccl, fin));
    m.add(std::make_unique<nccl::NcclBroadcast>(*nccl, fin));
    m.add(std::make_unique<nccl::NcclAlltoall>(*nccl, fin));
    m.add(std::make_unique<nccl::NcclReducescatter>(*nccl, fin));
    m.add(std::make_unique<nccl::NcclSendRecv>(*nccl, fin));
  }
  auto staged = [&](std::unique_ptr<CollectiveOp> op) {
    m.add(std::make_unique<cuda::StagedOp>(std::move(op), *gpu.cuda(), fin));
  };
  staged(std::make_unique<mpi::MpiAllreduce>(mpi, host_fusion, copies));
  staged(std::make_unique<mpi::MpiAllgather>(mpi));
  staged(std::make_unique<mpi::MpiBroadcast>(mpi));
  staged(std::make_unique<mpi::MpiAlltoall>(mpi));
  staged(std::make_unique<mpi::MpiReducescatter>(mpi, host_fusion));
  staged(std::make_unique<mpi::MpiSendRecv>(mpi));
}
#endif

}  // namespace

OperationManager make_operations(const comm::MpiContext& mpi, FusionBuffer& host_fusion,
                                 const GpuBackend& gpu, const OperationsOptions& options) {
  OperationManager m;
#if HVD_HAVE_CUDA
  if (gpu.active()) add_gpu_ops(m, mpi, host_fusion, gpu, options);
#else
  (void)gpu;
#endif
  if (options.hierarchical_allreduce)
    m.add(std::make_unique<hierarchical::MpiHierarchicalAllreduce>(mpi, host_fusion,
                                                                   options.host_copies));
  m.add(std::make_unique<mpi::MpiAllreduce>(mpi, host_fusion, options.host_copies));
  m.add(std::make_unique<mpi::MpiAllgather>(mpi));
  m.add(std::make_unique<mpi::MpiBroadcast>(mpi));
  m.add(std::make_unique<mpi::MpiAlltoall>(mpi));
  m.add(std::make_unique<mpi::MpiReducescatter>(mpi, host_fusion));
  m.add(std::make_unique<mpi::MpiSendRecv>(mpi));
  return m;
}

}  // namespace hvd::ops
