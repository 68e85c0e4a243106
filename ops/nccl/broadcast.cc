// Broadcast over NCCL: ncclBroadcast of each tensor's bytes in place, all tensors of a batch in one
// NCCL group. A joined rank's host stand-in goes through a device copy and back.
#include "hvd/error.h"
#include "ops/nccl/nccl_ops.h"

namespace hvd::ops::nccl {

void NcclBroadcast::execute(OpBatch& batch) {
  begin(batch);
  cudaStream_t s = stream();
  bool host = false;
  for (const auto& e : batch.entries) host = host || e.output.device().kind != Device::kCUDA;
  if (host && batch.entries.size() != 1)
    throw InternalError(
        "broadcast of '" + batch.entries[0].name +
        "' failed: a fused broadcast mixes host and device tensors; please report this.");
  ncclComm_t comm = ctx_.world();  // before the group (nccl_context.h)
  NCCL_CHECK(ncclGroupStart());
  void* staged = nullptr;
  for (auto& e : batch.entries) {
    const size_t bytes = e.output.size_bytes();
    if (bytes == 0) continue;
    void* p = e.output.data();
    if (e.output.device().kind != Device::kCUDA)
      p = staged = const_cast<void*>(on_device(e.output, ctx_.cuda().scratch()));
    NCCL_CHECK(ncclBroadcast(p, p, bytes, ncclUint8, batch.root, comm, s));
  }
  NCCL_CHECK(ncclGroupEnd());
  if (staged)
    CUDA_CHECK(cudaMemcpyAsync(batch.entries[0].output.data(), staged,
                               batch.entries[0].output.size_bytes(), cudaMemcpyDeviceToHost, s));
  end();
}

}  // namespace hvd::ops::nccl
