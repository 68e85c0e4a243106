// Allreduce over MPI.
//
// One tensor: reduced straight from the caller's input into its output (MPI_IN_PLACE when they are
// the same memory), so the common unfused case adds no copy. A prescale is applied while copying
// input to output; the postscale (and 1/contributors for kAverage) in one pass afterwards.
// Several tensors (a fused batch): packed into the persistent fusion buffer (prescale applied while
// packing), one MPI_Allreduce, unpacked (postscale applied while unpacking). Scaling is fused into
// the copies, so a fused batch touches each byte three times: pack, reduce, unpack.
#include <cstring>

#include "ops/dtype_math.h"
#include "ops/mpi/mpi_ops.h"

namespace hvd::ops::mpi {

void allreduce_chunked(const MpiContext& ctx, const void* sendbuf, void* recvbuf, int64_t count,
                       DataType dtype, ReduceOp op, MPI_Comm comm) {
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  for (int64_t done = 0; done < count;) {
    int n = static_cast<int>(std::min(count - done, kMaxMpiCount));
    const void* s = sendbuf == MPI_IN_PLACE ? MPI_IN_PLACE : static_cast<const char*>(sendbuf) + done * esize;
    void* r = static_cast<char*>(recvbuf) + done * esize;
    MPI_CHECK(MPI_Allreduce(s, r, n, ctx.datatype(dtype), ctx.op(dtype, op), comm));
    done += n;
  }
}

void MpiAllreduce::execute(OpBatch& batch) {
  const double post = post_factor(batch);
  if (batch.entries.size() == 1) {
    OpEntry& e = batch.entries[0];
    const int64_t n = e.output.num_elements();
    if (n == 0) return;
    const void* send = MPI_IN_PLACE;
    if (batch.prescale != 1.0) {
      scale_copy(batch.dtype, e.input.data(), e.output.data(), static_cast<size_t>(n), batch.prescale);
    } else if (e.input.data() != e.output.data()) {
      send = e.input.data();
    }
    allreduce_chunked(ctx_, send, e.output.data(), n, batch.dtype, batch.reduce_op, ctx_.world());
    scale_buffer(batch.dtype, e.output.data(), static_cast<size_t>(n), post);
    return;
  }
  std::vector<int64_t> sizes;
  sizes.reserve(batch.entries.size());
  for (const auto& e : batch.entries) sizes.push_back(static_cast<int64_t>(e.input.size_bytes()));
  FusionLayout layout = fusion_layout(sizes, 1);
  char* buf = static_cast<char*>(buffer_.get(static_cast<size_t>(layout.total_bytes)));
  {
    TraceScope trace(batch, "MEMCPY_IN_FUSION_BUFFER");
    for (size_t i = 0; i < batch.entries.size(); ++i) {
      const auto& e = batch.entries[i];
      scale_copy(batch.dtype, e.input.data(), buf + layout.offsets[i], static_cast<size_t>(e.input.num_elements()),
                 batch.prescale);
    }
  }
  const int64_t count = layout.total_bytes / static_cast<int64_t>(dtype_size(batch.dtype));
  allreduce_chunked(ctx_, MPI_IN_PLACE, buf, count, batch.dtype, batch.reduce_op, ctx_.world());
  TraceScope trace(batch, "MEMCPY_OUT_FUSION_BUFFER");
  for (size_t i = 0; i < batch.entries.size(); ++i) {
    auto& e = batch.entries[i];
    scale_copy(batch.dtype, buf + layout.offsets[i], e.output.data(), static_cast<size_t>(e.output.num_elements()),
               post);
  }
}

}  // namespace hvd::ops::mpi
