// Reducescatter over MPI: MPI_Reduce_scatter with blocks of whole rows, as even as possible (the
// first rows % size ranks get one more row). A prescale is applied to a copy in the fusion buffer
// (the caller's input is never modified); the postscale (and 1/contributors for kAverage) to the
// result.
#include <limits>

#include "hvd/error.h"
#include "common/dtype_math.h"
#include "ops/mpi/mpi_ops.h"

namespace hvd::ops::mpi {

void MpiReducescatter::execute(OpBatch& batch) {
  OpEntry& e = batch.entries.at(0);
  const auto& shape = e.input.shape();
  const int size = ctx_.topology().size;
  const int me = ctx_.topology().rank;
  int64_t rows = shape.empty() ? 1 : shape[0];
  int64_t row_elems = 1;
  for (size_t d = 1; d < shape.size(); ++d) row_elems *= shape[d];
  std::vector<int> counts(size);
  for (int r = 0; r < size; ++r) {
    int64_t block = rows / size + (r < rows % size ? 1 : 0);
    int64_t c = block * row_elems;
    if (c > std::numeric_limits<int>::max())
      throw InvalidArgumentError("reducescatter of '" + e.name + "' failed: a block of " +
                                 std::to_string(c) +
                                 " elements exceeds what one MPI call can move; split the tensor.");
    counts[r] = static_cast<int>(c);
  }
  std::vector<int64_t> out_shape = shape.empty() ? std::vector<int64_t>{1} : shape.vec();
  out_shape[0] = rows / size + (me < rows % size ? 1 : 0);
  *e.result = Tensor(batch.dtype, out_shape);
  const int64_t n = e.input.num_elements();
  const void* send = e.input.data();
  if (batch.prescale != 1.0 && n > 0) {
    void* tmp = buffer_.get(e.input.size_bytes());
    scale_copy(batch.dtype, e.input.data(), tmp, static_cast<size_t>(n), batch.prescale);
    send = tmp;
  }
  if (n > 0) {
    MPI_CHECK(MPI_Reduce_scatter(send, e.result->data(), counts.data(), ctx_.datatype(batch.dtype),
                                 ctx_.op(batch.dtype, batch.reduce_op), ctx_.world()));
  }
  scale_buffer(batch.dtype, e.result->data(), static_cast<size_t>(e.result->num_elements()),
               post_factor(batch));
}

}  // namespace hvd::ops::mpi
