#pragma once

// The raw-MPI baselines hvd is measured against, on the same data as hvd:
//   unfused: one MPI_Allreduce per tensor (what a trainer without hvd's fusion would do), in place
//            (MPI_IN_PLACE) when a tensor's input and output are the same buffer;
//   fused:   the K tensors copied into one buffer, one in-place MPI_Allreduce, copied back out
//            (what hand-written fusion would do; hvd's fusion buffer does the same work).
// avg is MPI_SUM followed by a division pass, as hvd must also do (MPI has no average).
// half and bfloat16 go through user-defined MPI ops that compute in float and round to nearest
// even, on MPI_UINT16_T elements (Open MPI 4.1 has no 16-bit float type).
//
// Thread safety: one instance per process, used by the thread that calls MPI; needs MPI
// initialised for its whole life (it creates and frees MPI_Op handles).

#include <mpi.h>

#include <cstdint>
#include <vector>

#include <hvd/tensor.h>

namespace allreduce_bench {

class MpiBaseline {
 public:
  explicit MpiBaseline(MPI_Comm comm);
  ~MpiBaseline();
  MpiBaseline(const MpiBaseline&) = delete;
  MpiBaseline& operator=(const MpiBaseline&) = delete;

  // out[k] = reduce over ranks of in[k], k < in.size(), each of `count` elements; in[k] == out[k]
  // reduces in place (MPI_IN_PLACE).
  void run_unfused(hvd::DataType dtype, hvd::ReduceOp op, const std::vector<void*>& in,
                   const std::vector<void*>& out, int64_t count) const;
  // The same result through one call on `fused` (in.size() * count elements).
  void run_fused(hvd::DataType dtype, hvd::ReduceOp op, const std::vector<void*>& in,
                 const std::vector<void*>& out, int64_t count, void* fused) const;

 private:
  MPI_Datatype mpi_type(hvd::DataType dtype) const;
  MPI_Op mpi_op(hvd::DataType dtype, hvd::ReduceOp op) const;

  MPI_Comm comm_;
  int size_ = 1;
  MPI_Op half_ops_[4];  // sum, prod, min, max
  MPI_Op bf16_ops_[4];
};

}  // namespace allreduce_bench
