// Alltoall over MPI: the row counts each rank sends are exchanged first (MPI_Alltoall), then the
// rows themselves (MPI_Alltoallv); the result holds the received rows in rank order.
#include <limits>

#include "hvd/error.h"
#include "ops/mpi/mpi_ops.h"

namespace hvd::ops::mpi {

void MpiAlltoall::execute(OpBatch& batch) {
  OpEntry& e = batch.entries.at(0);
  const auto& shape = e.input.shape();
  const int64_t row = row_bytes(e.input);
  const int size = ctx_.topology().size;
  std::vector<int64_t> recv_rows(size);
  MPI_CHECK(MPI_Alltoall(e.splits.data(), 1, MPI_INT64_T, recv_rows.data(), 1, MPI_INT64_T,
                         ctx_.world()));
  std::vector<int> scounts(size), sdispls(size), rcounts(size), rdispls(size);
  int64_t soff = 0, roff = 0, total_rows = 0;
  auto check = [&](int64_t v) {
    if (v > std::numeric_limits<int>::max())
      throw InvalidArgumentError("alltoall of '" + e.name + "' failed: " + std::to_string(v) +
                                 " bytes exceed the 2 GiB an MPI call can move; split the tensor.");
    return static_cast<int>(v);
  };
  for (int r = 0; r < size; ++r) {
    scounts[r] = check(e.splits[r] * row);
    sdispls[r] = check(soff);
    soff += e.splits[r] * row;
    rcounts[r] = check(recv_rows[r] * row);
    rdispls[r] = check(roff);
    roff += recv_rows[r] * row;
    total_rows += recv_rows[r];
  }
  std::vector<int64_t> out_shape = shape;
  out_shape[0] = total_rows;
  *e.result = Tensor(batch.dtype, out_shape);
  MPI_CHECK(MPI_Alltoallv(e.input.data(), scounts.data(), sdispls.data(), MPI_BYTE,
                          e.result->data(), rcounts.data(), rdispls.data(), MPI_BYTE,
                          ctx_.world()));
  if (e.received_splits) *e.received_splits = recv_rows;
}

}  // namespace hvd::ops::mpi
