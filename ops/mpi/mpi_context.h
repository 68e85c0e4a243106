#pragma once

// What the MPI backend needs: hvd's own communicators (a duplicate of the world, so user traffic on
// MPI_COMM_WORLD never mixes with ours; the node-local one; the cross-node one among ranks of the
// same local rank), the MPI datatype and reduction op for every hvd dtype (fp16 and bf16 through a
// 2-byte datatype and custom ops that round to nearest even), and MPI_CHECK.
//
// Created by the runtime at init() on the user's thread (the communicator calls are collective),
// then used by the background thread only. Every communicator returns errors
// (MPI_ERRORS_RETURN) so that MPI_CHECK can report them.

#include <mpi.h>

#include <string>

#include "hvd/tensor.h"

namespace hvd::ops::mpi {

// Throws CommunicationError naming the call, the rank, MPI's error string and the library.
[[noreturn]] void throw_mpi_error(const char* call, int code, const char* file, int line);

#define MPI_CHECK(call)                                                         \
  do {                                                                          \
    int hvd_mpi_rc_ = (call);                                                   \
    if (hvd_mpi_rc_ != MPI_SUCCESS)                                             \
      ::hvd::ops::mpi::throw_mpi_error(#call, hvd_mpi_rc_, __FILE__, __LINE__); \
  } while (0)

// HVD_COMPRESSION for the all-reduce ops of this backend (the flat and hierarchical CPU ops, and
// the host-staged path of CUDA tensors, which runs the flat op on host copies): float32 and float64
// tensors travel as fp16 or bf16 (ops/mpi/allreduce.cc says how); other dtypes never change.
enum class Compression { kNone, kFp16, kBf16 };
// "none" | "fp16" | "bf16" (the config's spellings, case-insensitive); throws InvalidArgumentError.
Compression parse_compression(const std::string& value);
const char* compression_name(Compression c);
// The dtype a batch of `dtype` travels as: kFloat16/kBFloat16 for float32/float64 under fp16/bf16,
// else `dtype` itself.
DataType wire_dtype(Compression c, DataType dtype);

struct MpiTopology {
  int rank = 0, size = 1;
  int local_rank = 0, local_size = 1;
  int cross_rank = 0, cross_size = 1;
  bool homogeneous = true;
};

class MpiContext {
 public:
  // Collective over MPI_COMM_WORLD. `fake_local_size` > 0 splits the world into fake nodes of
  // that many consecutive ranks (tests of the hierarchical path on one machine).
  explicit MpiContext(int fake_local_size = 0);
  ~MpiContext();
  MpiContext(const MpiContext&) = delete;
  MpiContext& operator=(const MpiContext&) = delete;

  MPI_Comm world() const { return world_; }
  MPI_Comm local() const { return local_; }
  MPI_Comm cross() const { return cross_; }
  const MpiTopology& topology() const { return topo_; }

  MPI_Datatype datatype(DataType dtype) const;
  MPI_Op op(DataType dtype, ReduceOp op) const;

  // Set once by the runtime at init(), before the background thread starts (HVD_COMPRESSION);
  // read by the all-reduce ops. Rank 0 logs a warning when bf16 is asked for in a build with NCCL
  // and a visible GPU: the NCCL path compresses fp16 only, so its CUDA tensors stay uncompressed.
  void set_compression(Compression c);
  Compression compression() const { return compression_; }

 private:
  MPI_Comm world_ = MPI_COMM_NULL, local_ = MPI_COMM_NULL, cross_ = MPI_COMM_NULL;
  MpiTopology topo_;
  MPI_Datatype half_type_ = MPI_DATATYPE_NULL;
  MPI_Op half_ops_[2][5] = {};  // [fp16, bf16][sum, min, max, product, (unused)]
  Compression compression_ = Compression::kNone;
};

// MPI counts are int: calls on more elements run in chunks of at most this many.
constexpr int64_t kMaxMpiCount = (int64_t{1} << 30);

}  // namespace hvd::ops::mpi
