// Host staging of CUDA tensors for the MPI backend; see staged.h.
#include "ops/cuda/staged.h"

#include "hvd/error.h"
#include "ops/fusion_buffer.h"

namespace hvd::ops::cuda {

StagedOp::StagedOp(std::unique_ptr<CollectiveOp> inner, cuda::CudaContext& cuda,
                   cuda::Finalizer& finalizer)
    : inner_(std::move(inner)), cuda_(cuda), finalizer_(finalizer) {
  std::string n = inner_->name();
  if (n.rfind("mpi_", 0) == 0) n = n.substr(4);
  name_ = "mpi_staged_" + n;
}

void StagedOp::execute(OpBatch& batch) {
  cuda_.activate();
  cudaStream_t s = cuda_.stream();
  // What each entry stages: the input, except for broadcast and send/recv, whose in/out tensor is
  // `output` (a sender copies its unchanged bytes back: one path for both ends).
  const bool bcast =
      batch.type == CollectiveType::kBroadcast || batch.type == CollectiveType::kSendRecv;
  const bool copy_back = bcast || batch.type == CollectiveType::kAllreduce;
  std::vector<void*> streams;
  std::vector<int64_t> sizes;
  for (const auto& e : batch.entries) {
    const TensorRef& t = bcast ? e.output : e.input;
    for (const TensorRef* r : {&e.input, &e.output}) {
      if (r->device().kind != Device::kCUDA) continue;
      check_device(batch, e, *r, cuda_.device());
      streams.push_back(r->stream());
    }
    sizes.push_back(t.device().kind == Device::kCUDA ? static_cast<int64_t>(t.size_bytes()) : 0);
  }
  cuda_.wait_for_all(streams);
  const FusionLayout layout = fusion_layout(sizes, 64);
  char* staging = static_cast<char*>(
      cuda_.staging().get(static_cast<size_t>(layout.total_bytes > 0 ? layout.total_bytes : 1), s));

  OpBatch host = batch;
  host.device = Device::cpu();
  for (size_t i = 0; i < batch.entries.size(); ++i) {
    const OpEntry& e = batch.entries[i];
    OpEntry& h = host.entries[i];
    const TensorRef& t = bcast ? e.output : e.input;
    if (t.device().kind != Device::kCUDA) continue;  // a joined rank's host stand-in: used as is
    char* p = staging + layout.offsets[i];
    if (sizes[i] > 0)
      CUDA_CHECK(
          cudaMemcpyAsync(p, t.data(), static_cast<size_t>(sizes[i]), cudaMemcpyDeviceToHost, s));
    TensorRef view(p, t.dtype(), t.shape());
    // Allreduce runs in place in the staging buffer; the others read the staged input.
    h.input = view;
    if (copy_back) h.output = view;
  }
  CUDA_CHECK(cudaStreamSynchronize(s));
  inner_->execute(host);
  if (copy_back) {
    for (size_t i = 0; i < batch.entries.size(); ++i) {
      const TensorRef& out = batch.entries[i].output;
      if (out.device().kind != Device::kCUDA || sizes[i] == 0) continue;
      CUDA_CHECK(cudaMemcpyAsync(out.data(), staging + layout.offsets[i],
                                 static_cast<size_t>(sizes[i]), cudaMemcpyHostToDevice, s));
    }
  }
  finalizer_.set_pending(cuda_.record_completion());
}

}  // namespace hvd::ops::cuda
