#include "ops/gpu_backend.h"

#include "hvd/config.h"

#if HVD_HAVE_CUDA
#include "ops/cuda/cuda_context.h"
#include "ops/cuda/finalizer.h"
#include "ops/hierarchical/hierarchical_ops.h"
#include "ops/mpi/mpi_ops.h"
#include "ops/cuda/staged.h"
#include "ops/nccl/nccl_ops.h"
#endif

namespace hvd::ops {

#if HVD_HAVE_CUDA

struct GpuBackend::Impl {
  const comm::MpiContext& mpi;
  FusionBuffer& host_fusion;
  GpuBackendOptions options;
  // Destroyed in reverse: the finalizer (drains) and NCCL before the CUDA context.
  std::unique_ptr<cuda::CudaContext> cuda;
  std::unique_ptr<nccl::NcclContext> nccl;
  std::unique_ptr<cuda::Finalizer> finalizer;
};

GpuBackend::GpuBackend(const comm::MpiContext& mpi, FusionBuffer& host_fusion,
                       const GpuBackendOptions& options)
    : impl_(new Impl{mpi, host_fusion, options, nullptr, nullptr, nullptr}) {
  if (options.device < 0) return;
  impl_->cuda = std::make_unique<cuda::CudaContext>(options.device);  // lazy: no CUDA call yet
  if (options.use_nccl) impl_->nccl = std::make_unique<nccl::NcclContext>(mpi, *impl_->cuda);
  impl_->finalizer = std::make_unique<cuda::Finalizer>(*impl_->cuda);
}

int GpuBackend::visible_devices() { return cuda::visible_device_count(); }

bool GpuBackend::active() const { return impl_ && impl_->cuda != nullptr; }

void GpuBackend::register_ops(OperationManager& m) {
  if (!active()) return;
  Impl& i = *impl_;
  cuda::Finalizer& fin = *i.finalizer;
  if (i.nccl) {
    if (i.options.hierarchical)
      m.add(std::make_unique<hierarchical::NcclHierarchicalAllreduce>(*i.nccl, fin));
    nccl::NcclAllreduceOptions o;
    o.fp16_compression = i.options.fp16_compression;
    m.add(std::make_unique<nccl::NcclAllreduce>(*i.nccl, fin, o));
    m.add(std::make_unique<nccl::NcclAllgather>(*i.nccl, fin));
    m.add(std::make_unique<nccl::NcclBroadcast>(*i.nccl, fin));
    m.add(std::make_unique<nccl::NcclAlltoall>(*i.nccl, fin));
    m.add(std::make_unique<nccl::NcclReducescatter>(*i.nccl, fin));
  }
  auto staged = [&](std::unique_ptr<CollectiveOp> op) {
    m.add(std::make_unique<cuda::StagedOp>(std::move(op), *i.cuda, fin));
  };
  staged(std::make_unique<mpi::MpiAllreduce>(i.mpi, i.host_fusion));
  staged(std::make_unique<mpi::MpiAllgather>(i.mpi));
  staged(std::make_unique<mpi::MpiBroadcast>(i.mpi));
  staged(std::make_unique<mpi::MpiAlltoall>(i.mpi));
  staged(std::make_unique<mpi::MpiReducescatter>(i.mpi, i.host_fusion));
}

void GpuBackend::finish(std::function<void(const std::string&)> done) {
  if (active() && impl_->finalizer) {
    impl_->finalizer->finish(std::move(done));
  } else if (done) {
    done("");
  }
}

void GpuBackend::discard_pending() {
  if (active() && impl_->finalizer) impl_->finalizer->discard_pending();
}

void GpuBackend::shutdown() {
  if (!impl_) return;
  impl_->finalizer.reset();
  impl_->nccl.reset();
  impl_->cuda.reset();
}

#else  // no CUDA in this build: nothing to build, register or wait for

struct GpuBackend::Impl {};

GpuBackend::GpuBackend(const comm::MpiContext&, FusionBuffer&, const GpuBackendOptions&) {}
int GpuBackend::visible_devices() { return 0; }
bool GpuBackend::active() const { return false; }
void GpuBackend::register_ops(OperationManager&) {}
void GpuBackend::finish(std::function<void(const std::string&)> done) {
  if (done) done("");
}
void GpuBackend::discard_pending() {}
void GpuBackend::shutdown() {}

#endif

GpuBackend::~GpuBackend() { shutdown(); }

}  // namespace hvd::ops
