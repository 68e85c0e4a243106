#include "ops/gpu_backend.h"

#include <map>

#include "common/logging.h"
#include "hvd/config.h"

#if HVD_HAVE_CUDA
#include "ops/cuda/cuda_context.h"
#include "ops/cuda/finalizer.h"
#include "ops/nccl/nccl_context.h"
#endif

namespace hvd::ops {

#if HVD_HAVE_CUDA

struct GpuBackend::Impl {
  // Destroyed in reverse: the finalizer (drains) and NCCL before the CUDA context.
  std::unique_ptr<cuda::CudaContext> cuda;
  std::unique_ptr<nccl::NcclContext> nccl;
  std::map<int, std::unique_ptr<nccl::NcclContext>> set_nccl;  // by process set id
  std::unique_ptr<cuda::Finalizer> finalizer;
  bool async_completion = false;
};

GpuBackend::GpuBackend(const comm::MpiContext& mpi, const GpuBackendOptions& options)
    : impl_(new Impl{}) {
  if (options.device < 0) return;
  impl_->cuda = std::make_unique<cuda::CudaContext>(options.device);  // lazy: no CUDA call yet
  if (options.use_nccl) impl_->nccl = std::make_unique<nccl::NcclContext>(mpi, *impl_->cuda);
  impl_->finalizer = std::make_unique<cuda::Finalizer>(*impl_->cuda, options.finalizer_poll_us);
  impl_->async_completion = options.async_completion;
}

int GpuBackend::visible_devices() { return cuda::visible_device_count(); }

int GpuBackend::current_device() {
  int d = -1;
  if (cudaGetDevice(&d) != cudaSuccess) {
    cudaGetLastError();
    return -1;
  }
  return d;
}

void GpuBackend::set_current_device(int device) {
  if (device >= 0 && cudaSetDevice(device) != cudaSuccess) cudaGetLastError();
}

int GpuBackend::nccl_version() {
  int v = 0;
  return ncclGetVersion(&v) == ncclSuccess ? v : 0;
}

bool GpuBackend::active() const { return impl_ && impl_->cuda != nullptr; }

cuda::CudaContext* GpuBackend::cuda() const { return impl_ ? impl_->cuda.get() : nullptr; }
nccl::NcclContext* GpuBackend::nccl() const { return impl_ ? impl_->nccl.get() : nullptr; }
cuda::Finalizer* GpuBackend::finalizer() const { return impl_ ? impl_->finalizer.get() : nullptr; }

nccl::NcclContext* GpuBackend::set_nccl(int id, const comm::MpiContext& mpi) {
  if (!impl_ || !impl_->nccl) return nullptr;
  auto& slot = impl_->set_nccl[id];
  if (!slot) slot = std::make_unique<nccl::NcclContext>(mpi, *impl_->cuda);
  return slot.get();
}

void GpuBackend::drop_set_nccl(int id) {
  if (impl_) impl_->set_nccl.erase(id);
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

bool GpuBackend::async_completion() const { return active() && impl_->async_completion; }

void GpuBackend::finish_ordered(const std::vector<void*>& streams,
                                std::function<void(const std::string&)> done, std::string what) {
  if (async_completion() && impl_->finalizer) {
    auto late = [what = std::move(what)](const std::string& error) {
      if (!error.empty())
        HVD_LOG(Error) << what << " failed on the GPU after its handles completed "
                       << "(HVD_ENABLE_ASYNC_COMPLETION=1): " << error
                       << " Its outputs are not valid. Run with HVD_ENABLE_ASYNC_COMPLETION=0 "
                          "to have wait() of the operation that failed report it.";
    };
    if (impl_->finalizer->finish_ordered(streams, done, std::move(late))) return;
  }
  finish(std::move(done));
}

void GpuBackend::shutdown() {
  if (!impl_) return;
  impl_->finalizer.reset();
  impl_->set_nccl.clear();
  impl_->nccl.reset();
  impl_->cuda.reset();
}

#else  // no CUDA in this build: nothing to build or wait for

struct GpuBackend::Impl {};

GpuBackend::GpuBackend(const comm::MpiContext&, const GpuBackendOptions&) {}
int GpuBackend::visible_devices() { return 0; }
int GpuBackend::current_device() { return -1; }
void GpuBackend::set_current_device(int) {}
int GpuBackend::nccl_version() { return 0; }
bool GpuBackend::active() const { return false; }
cuda::CudaContext* GpuBackend::cuda() const { return nullptr; }
nccl::NcclContext* GpuBackend::nccl() const { return nullptr; }
cuda::Finalizer* GpuBackend::finalizer() const { return nullptr; }
nccl::NcclContext* GpuBackend::set_nccl(int, const comm::MpiContext&) { return nullptr; }
void GpuBackend::drop_set_nccl(int) {}
void GpuBackend::finish(std::function<void(const std::string&)> done) {
  if (done) done("");
}
void GpuBackend::discard_pending() {}
bool GpuBackend::async_completion() const { return false; }
void GpuBackend::finish_ordered(const std::vector<void*>&,
                                std::function<void(const std::string&)> done, std::string) {
  finish(std::move(done));
}
void GpuBackend::shutdown() {}

#endif

GpuBackend::~GpuBackend() { shutdown(); }

}  // namespace hvd::ops
