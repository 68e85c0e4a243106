// Allgather over MPI: MPI_Allgatherv of whole rows, the first dimension of every rank known from
// negotiation (OpBatch::first_dims), the result allocated here.
#include <limits>

#include "hvd/error.h"
#include "ops/mpi/mpi_ops.h"

namespace hvd::ops::mpi {

void MpiAllgather::execute(OpBatch& batch) {
  OpEntry& e = batch.entries.at(0);
  const auto& shape = e.input.shape();
  const int64_t row = row_bytes(e.input);
  const int size = ctx_.topology().size;
  std::vector<int> counts(size), displs(size);
  int64_t total_rows = 0, offset = 0;
  for (int r = 0; r < size; ++r) {
    int64_t bytes = batch.first_dims.at(r) * row;
    if (bytes > std::numeric_limits<int>::max() || offset > std::numeric_limits<int>::max())
      throw InvalidArgumentError("allgather of '" + e.name + "' failed: " + std::to_string(bytes) +
                                 " bytes from rank " + std::to_string(r) +
                                 " exceed the 2 GiB an MPI call can move; split the tensor.");
    counts[r] = static_cast<int>(bytes);
    displs[r] = static_cast<int>(offset);
    offset += bytes;
    total_rows += batch.first_dims[r];
  }
  std::vector<int64_t> out_shape = shape.empty() ? std::vector<int64_t>{total_rows} : shape.vec();
  out_shape[0] = total_rows;
  *e.result = Tensor(batch.dtype, out_shape);
  const int me = ctx_.topology().rank;
  MPI_CHECK(MPI_Allgatherv(e.input.data(), counts[me], MPI_BYTE, e.result->data(), counts.data(),
                           displs.data(), MPI_BYTE, ctx_.world()));
}

}  // namespace hvd::ops::mpi
