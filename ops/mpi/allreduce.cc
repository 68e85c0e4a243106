// Allreduce over MPI: the skeleton of ops/fused_allreduce.h (one tensor straight from input to
// output, MPI_IN_PLACE when they are the same memory; a fused batch packed into the persistent
// fusion buffer with the prescale, one MPI_Allreduce in place, unpacked with the postscale),
// reduced by MPI_Allreduce in chunks of at most comm::kMaxMpiCount elements.
//
// HVD_COMPRESSION=fp16|bf16 (ctx.compression()), float32 and float64 batches only (other dtypes
// take the paths above unchanged), one tensor or many, every reduce op:
//   1. pack (HostMemory): each input is cast straight into the fusion buffer as 16-bit values
//      (prescale folded into the cast, rounded once): the buffer holds 2 bytes per element instead
//      of 4 or 8, padded with zeros to a multiple of the rank count;
//   2. reduce-scatter by MPI_Alltoall: the buffer is cut into one block per rank, and every rank
//      receives every rank's 16-bit copy of its own block; it combines them in double, in rank
//      order, multiplies by 1/contributors for kAverage, and rounds once to 16 bits;
//   3. MPI_Allgather (in place) of the reduced blocks: every rank has the whole 16-bit result;
//   4. unpack (HostMemory): each output is cast back from 16 bits with the postscale folded into
//      the cast (the division of kAverage is done: reduce() returns only the postscale).
// Steps 2 and 3 each move (n-1)/n of the 16-bit buffer per rank: half the bytes of a float32
// ring all-reduce, a quarter of a float64 one. Why not MPI_Allreduce with hvd's fp16/bf16 MPI
// ops: those round every partial sum to 16 bits (n-1 roundings, in an order MPI picks, and a sum
// of fp16 gradients may overflow 65504 where their average does not); here each result is
// rounded once, after the division of kAverage, and each block is reduced by one rank in a fixed
// order, so every rank ends with the same bits whatever algorithm MPI uses. Rounds of at most
// kCompressedRound elements bound the receive scratch (rounds are whole multiples of the rank
// count; only the last is padded, by the packing).
#include <algorithm>
#include <cstring>
#include <vector>

#include "common/dtype.h"
#include "common/dtype_math.h"
#include "ops/mpi/mpi_ops.h"

namespace hvd::ops::mpi {

void allreduce_chunked(const comm::MpiContext& ctx, const void* sendbuf, void* recvbuf,
                       int64_t count, DataType dtype, ReduceOp op, MPI_Comm comm) {
  const int64_t esize = static_cast<int64_t>(dtypes::size(dtype));
  // One rank (a job of one, or a hierarchical level of one: one node, one rank per node): the
  // reduction of one contribution is that contribution, and MPI would only copy it, through a
  // collective's dispatch per call (a job of one rank runs each small tensor as its own batch).
  int ranks = 0;
  MPI_CHECK(MPI_Comm_size(comm, &ranks));
  if (ranks == 1) {
    if (sendbuf != MPI_IN_PLACE && count > 0)
      std::memmove(recvbuf, sendbuf, static_cast<std::size_t>(count * esize));
    return;
  }
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
constexpr int64_t kOrderedRoundBytes = int64_t{64} << 20;  // deterministic: bytes per round
}  // namespace

double MpiAllreduce::reduce(const void* in, void* out, int64_t count, DataType dtype,
                            const OpBatch& batch, double post) {
  if (dtype != batch.dtype) {
    reduce_compressed(static_cast<uint16_t*>(out), count, dtype, batch);
    return batch.postscale;  // 1/contributors is folded into the one rounding
  }
  // Two ranks: whatever its algorithm, MPI_Allreduce makes each element with one op of the two
  // values, and IEEE addition and multiplication commute; and one op in the dtype gives the bits
  // of reduce_blocks_ordered's op in double rounded once (double has at least 2p+2 bits of a
  // float's or a 16-bit float's p; hvd's fp16/bf16 MPI ops compute in float: 24 >= 2*11+2). So
  // two ranks take MPI_Allreduce, deterministic already.
  if (batch.deterministic && ordered_reduction(dtype, batch.reduce_op) &&
      ctx_.topology().size > 2) {
    reduce_in_rank_order(in, out, count, dtype, batch.reduce_op);
    return post;
  }
  allreduce_chunked(ctx_, in == out ? MPI_IN_PLACE : in, out, count, dtype, batch.reduce_op,
                    ctx_.world());
  return post;
}

// `n` is a multiple of the rank count (the packing pads it).
void MpiAllreduce::reduce_compressed(uint16_t* buf, int64_t n, DataType wire,
                                     const OpBatch& batch) {
  const int64_t p = ctx_.topology().size;
  const int64_t me = ctx_.topology().rank;
  const double divide = batch.reduce_op == ReduceOp::kAverage
                            ? 1.0 / (batch.contributors > 0 ? batch.contributors : 1)
                            : 1.0;
  const MPI_Datatype type = ctx_.datatype(wire);
  const int64_t round = std::max<int64_t>(kCompressedRound / p, 1) * p;
  for (int64_t done = 0; done < n;) {
    const int64_t len = std::min(n - done, round);
    const int64_t block = len / p;
    uint16_t* chunk = buf + done;
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
}

// HVD_DETERMINISTIC: each round of the elements is cut into one block per rank (the first
// len % p blocks one element longer); MPI_Alltoallv gives every rank every rank's copy of its own
// block; it reduces them in rank order (reduce_blocks_ordered: in double, rounded once); and
// MPI_Allgatherv brings every rank the whole round. An element's result depends on the p values
// alone, never on where it sits nor on how many elements the batch has, which MPI_Allreduce's
// algorithms (recursive doubling, ring segments, chosen by size) do not give. It moves what a ring
// moves: (p-1)/p of the data twice per rank.
void MpiAllreduce::reduce_in_rank_order(const void* in, void* out, int64_t count, DataType dtype,
                                        ReduceOp op) {
  const size_t p = static_cast<size_t>(ctx_.topology().size);
  const size_t me = static_cast<size_t>(ctx_.topology().rank);
  const int64_t esize = static_cast<int64_t>(dtypes::size(dtype));
  const MPI_Datatype type = ctx_.datatype(dtype);
  const int64_t ranks = static_cast<int64_t>(p);
  const int64_t round = std::max<int64_t>(kOrderedRoundBytes / esize / ranks, 1) * ranks;
  std::vector<int> counts(p), displs(p), mine(p), at(p);
  for (int64_t done = 0; done < count;) {
    const int64_t len = std::min(count - done, round);
    int offset = 0;
    for (size_t j = 0; j < p; ++j) {
      counts[j] = static_cast<int>(len / ranks + (static_cast<int64_t>(j) < len % ranks ? 1 : 0));
      displs[j] = offset;
      offset += counts[j];
    }
    const int block = counts[me];
    for (size_t j = 0; j < p; ++j) {
      mine[j] = block;
      at[j] = static_cast<int>(j) * block;
    }
    const char* src = static_cast<const char*>(in) + done * esize;
    char* dst = static_cast<char*>(out) + done * esize;
    void* blocks = scratch_.get(static_cast<size_t>(int64_t{block} * ranks * esize));
    MPI_CHECK(MPI_Alltoallv(src, counts.data(), displs.data(), type, blocks, mine.data(), at.data(),
                            type, ctx_.world()));
    reduce_blocks_ordered(dtype, op, blocks, p, static_cast<size_t>(block),
                          static_cast<size_t>(block), dst + int64_t{displs[me]} * esize);
    MPI_CHECK(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, dst, counts.data(), displs.data(),
                             type, ctx_.world()));
    done += len;
  }
}

}  // namespace hvd::ops::mpi
