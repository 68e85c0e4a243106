// Allreduce over MPI.
//
// One tensor: reduced straight from the caller's input into its output (MPI_IN_PLACE when they are
// the same memory), so the common unfused case adds no copy. A prescale is applied while copying
// input to output; the postscale (and 1/contributors for kAverage) in one pass afterwards.
// Several tensors (a fused batch): packed into the persistent fusion buffer (prescale applied while
// packing), one MPI_Allreduce, unpacked (postscale applied while unpacking). Scaling is fused into
// the copies, so a fused batch touches each byte three times: pack, reduce, unpack.
//
// HVD_COMPRESSION=fp16|bf16 (ctx.compression()), float32 and float64 batches only (other dtypes
// take the paths above unchanged), one tensor or many, every reduce op:
//   1. pack: each input is cast straight into the fusion buffer as 16-bit values (prescale folded
//      into the cast, rounded once): the buffer holds 2 bytes per element instead of 4 or 8;
//   2. reduce-scatter by MPI_Alltoall: the buffer is cut into one block per rank, and every rank
//      receives every rank's 16-bit copy of its own block; it combines them in double, in rank
//      order, multiplies by 1/contributors for kAverage, and rounds once to 16 bits;
//   3. MPI_Allgather (in place) of the reduced blocks: every rank has the whole 16-bit result;
//   4. unpack: each output is cast back from 16 bits with the postscale folded into the cast.
// Steps 2 and 3 each move (n-1)/n of the 16-bit buffer per rank: half the bytes of a float32
// ring all-reduce, a quarter of a float64 one. Why not MPI_Allreduce with hvd's fp16/bf16 MPI
// ops: those round every partial sum to 16 bits (n-1 roundings, in an order MPI picks, and a sum
// of fp16 gradients may overflow 65504 where their average does not); here each result is
// rounded once, after the division of kAverage, and each block is reduced by one rank in a fixed
// order, so every rank ends with the same bits whatever algorithm MPI uses. Rounds of at most
// kCompressedRound elements bound the receive scratch (rounds are whole multiples of the rank
// count; only the last is padded, with zeros, inside the buffer's slack).
#include <algorithm>
#include <cstring>

#include "common/dtype_math.h"
#include "ops/mpi/mpi_ops.h"

namespace hvd::ops::mpi {

void allreduce_chunked(const comm::MpiContext& ctx, const void* sendbuf, void* recvbuf,
                       int64_t count, DataType dtype, ReduceOp op, MPI_Comm comm) {
  const int64_t esize = static_cast<int64_t>(dtype_size(dtype));
  for (int64_t done = 0; done < count;) {
    int n = static_cast<int>(std::min(count - done, comm::kMaxMpiCount));
    const void* s =
        sendbuf == MPI_IN_PLACE ? MPI_IN_PLACE : static_cast<const char*>(sendbuf) + done * esize;
    void* r = static_cast<char*>(recvbuf) + done * esize;
    MPI_CHECK(MPI_Allreduce(s, r, n, ctx.datatype(dtype), ctx.op(dtype, op), comm));
    done += n;
  }
}

namespace {
constexpr int64_t kCompressedRound = int64_t{1}
                                     << 24;  // 16-bit elements per alltoall/allgather round
}  // namespace

CompressedLayout compressed_layout(const OpBatch& batch) {
  CompressedLayout layout;
  layout.offsets.reserve(batch.entries.size());
  for (const auto& e : batch.entries) {
    layout.offsets.push_back(layout.count);
    layout.count += e.input.num_elements();
  }
  return layout;
}

void pack_compressed(const OpBatch& batch, DataType wire, const CompressedLayout& layout,
                     uint16_t* buf, double factor) {
  for (size_t i = 0; i < batch.entries.size(); ++i) {
    const auto& e = batch.entries[i];
    compress_copy(batch.dtype, wire, e.input.data(), buf + layout.offsets[i],
                  static_cast<size_t>(e.input.num_elements()), factor);
  }
}

void unpack_compressed(OpBatch& batch, DataType wire, const CompressedLayout& layout,
                       const uint16_t* buf, double factor) {
  for (size_t i = 0; i < batch.entries.size(); ++i) {
    auto& e = batch.entries[i];
    decompress_copy(wire, batch.dtype, buf + layout.offsets[i], e.output.data(),
                    static_cast<size_t>(e.output.num_elements()), factor);
  }
}

void MpiAllreduce::execute_compressed(OpBatch& batch, DataType wire) {
  const int64_t p = ctx_.topology().size;
  const int64_t me = ctx_.topology().rank;
  const CompressedLayout layout = compressed_layout(batch);
  const int64_t n = layout.count;
  if (n == 0) return;
  // p - 1 elements of slack: the last round is padded to a multiple of p.
  auto* buf = static_cast<uint16_t*>(buffer_.get(static_cast<size_t>(n + p) * sizeof(uint16_t)));
  {
    TraceScope trace(batch, "MEMCPY_IN_FUSION_BUFFER");
    pack_compressed(batch, wire, layout, buf, batch.prescale);
  }
  const double divide = batch.reduce_op == ReduceOp::kAverage
                            ? 1.0 / (batch.contributors > 0 ? batch.contributors : 1)
                            : 1.0;
  const MPI_Datatype type = ctx_.datatype(wire);
  const int64_t round = std::max<int64_t>(kCompressedRound / p, 1) * p;
  for (int64_t done = 0; done < n;) {
    const int64_t len = std::min(n - done, round);
    const int64_t block = (len + p - 1) / p;
    uint16_t* chunk = buf + done;
    std::fill(chunk + len, chunk + block * p, uint16_t{0});
    if (p == 1) {
      reduce_blocks_16(wire, batch.reduce_op, chunk, 1, 0, static_cast<size_t>(len), divide, chunk);
    } else {
      auto* blocks =
          static_cast<uint16_t*>(scratch_.get(static_cast<size_t>(block * p) * sizeof(uint16_t)));
      MPI_CHECK(MPI_Alltoall(chunk, static_cast<int>(block), type, blocks, static_cast<int>(block),
                             type, ctx_.world()));
      reduce_blocks_16(wire, batch.reduce_op, blocks, static_cast<size_t>(p),
                       static_cast<size_t>(block), static_cast<size_t>(block), divide,
                       chunk + me * block);
      MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, chunk, static_cast<int>(block),
                              type, ctx_.world()));
    }
    done += len;
  }
  TraceScope trace(batch, "MEMCPY_OUT_FUSION_BUFFER");
  unpack_compressed(batch, wire, layout, buf, batch.postscale);
}

void MpiAllreduce::execute(OpBatch& batch) {
  if (const DataType wire = wire_dtype(ctx_.compression(), batch.dtype); wire != batch.dtype) {
    execute_compressed(batch, wire);
    return;
  }
  const double post = post_factor(batch);
  if (batch.entries.size() == 1) {
    OpEntry& e = batch.entries[0];
    const int64_t n = e.output.num_elements();
    if (n == 0) return;
    const void* send = MPI_IN_PLACE;
    if (batch.prescale != 1.0) {
      scale_copy(batch.dtype, e.input.data(), e.output.data(), static_cast<size_t>(n),
                 batch.prescale);
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
      scale_copy(batch.dtype, e.input.data(), buf + layout.offsets[i],
                 static_cast<size_t>(e.input.num_elements()), batch.prescale);
    }
  }
  const int64_t count = layout.total_bytes / static_cast<int64_t>(dtype_size(batch.dtype));
  allreduce_chunked(ctx_, MPI_IN_PLACE, buf, count, batch.dtype, batch.reduce_op, ctx_.world());
  TraceScope trace(batch, "MEMCPY_OUT_FUSION_BUFFER");
  for (size_t i = 0; i < batch.entries.size(); ++i) {
    auto& e = batch.entries[i];
    scale_copy(batch.dtype, buf + layout.offsets[i], e.output.data(),
               static_cast<size_t>(e.output.num_elements()), post);
  }
}

}  // namespace hvd::ops::mpi
