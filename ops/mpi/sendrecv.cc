// Point-to-point over MPI: MPI_Send from the sender, MPI_Recv at the receiver, in chunks for
// tensors over 1 GiB. Both ends run the same response at the same place in the cycle's list, so the
// blocking calls meet; hvd's own communicator carries nothing else at that moment.
#include "ops/mpi/mpi_ops.h"

namespace hvd::ops::mpi {

void MpiSendRecv::execute(OpBatch& batch) {
  const int me = ctx_.topology().rank;
  constexpr int kTag = 0x5e4d;  // hvd's communicator: the response order pairs the messages
  for (auto& e : batch.entries) {
    char* p = static_cast<char*>(e.output.data());
    const int64_t bytes = static_cast<int64_t>(e.output.size_bytes());
    for (int64_t done = 0; done < bytes;) {
      const int n = static_cast<int>(std::min(bytes - done, comm::kMaxMpiCount));
      if (me == batch.root)
        MPI_CHECK(MPI_Send(p + done, n, MPI_BYTE, batch.peer, kTag, ctx_.world()));
      else if (me == batch.peer)
        MPI_CHECK(
            MPI_Recv(p + done, n, MPI_BYTE, batch.root, kTag, ctx_.world(), MPI_STATUS_IGNORE));
      done += n;
    }
  }
}

}  // namespace hvd::ops::mpi
