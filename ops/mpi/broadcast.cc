// Broadcast over MPI: MPI_Bcast of the tensor's bytes in place, in chunks for tensors over 1 GiB.
#include "ops/mpi/mpi_ops.h"

namespace hvd::ops::mpi {

void MpiBroadcast::execute(OpBatch& batch) {
  for (auto& e : batch.entries) {
    char* p = static_cast<char*>(e.output.data());
    int64_t bytes = static_cast<int64_t>(e.output.size_bytes());
    for (int64_t done = 0; done < bytes;) {
      int n = static_cast<int>(std::min(bytes - done, comm::kMaxMpiCount));
      MPI_CHECK(MPI_Bcast(p + done, n, MPI_BYTE, batch.root, ctx_.world()));
      done += n;
    }
  }
}

}  // namespace hvd::ops::mpi
