// Point-to-point over NCCL: ncclSend at the sender, ncclRecv at the receiver, on the pair's own
// communicator (NcclContext::pair: world() is created by every rank, and only these two run the
// response). The batch's tensors go in one NCCL group, in the order both ends list them.
#include <string>

#include "hvd/error.h"
#include "ops/nccl/nccl_ops.h"

namespace hvd::ops::nccl {

void NcclSendRecv::execute(OpBatch& batch) {
  const int me = ctx_.mpi().topology().rank;
  if (me != batch.root && me != batch.peer) return;  // the executor runs it on the two only
  begin(batch);
  const bool sender = me == batch.root;
  const int other = sender ? batch.peer : batch.root;
  ncclComm_t comm = ctx_.pair(batch.root, batch.peer);
  const int other_in_pair = other < me ? 0 : 1;
  NCCL_CHECK(ncclGroupStart());
  for (auto& e : batch.entries) {
    if (e.output.device().kind != Device::kCUDA)
      throw InternalError("send/recv of '" + e.name + "' failed on rank " + std::to_string(me) +
                          ": a host tensor reached the NCCL send/recv, which takes CUDA tensors "
                          "only; please report this (HVD_GPU_OPERATIONS=MPI avoids this path).");
    const size_t bytes = e.output.size_bytes();
    if (bytes == 0) continue;
    if (sender)
      NCCL_CHECK(ncclSend(e.output.data(), bytes, ncclUint8, other_in_pair, comm, stream()));
    else
      NCCL_CHECK(ncclRecv(e.output.data(), bytes, ncclUint8, other_in_pair, comm, stream()));
  }
  NCCL_CHECK(ncclGroupEnd());
  end();
}

}  // namespace hvd::ops::nccl
