#pragma once

// What the NCCL backend needs: NCCL_CHECK, the dtype and reduce-op mappings, and the
// communicators: world, local (ranks of this node) and cross (ranks of the same local rank on
// every node), each created from a ncclUniqueId that rank 0 of the matching MPI communicator
// (comm/mpi_context.h) makes and MPI_Bcast delivers.
//
// Communicators are created on first use, on the background thread: creating one is collective,
// and it is safe lazily because every rank executes the same batches in the same order, so every
// rank reaches the first GPU batch (or the first hierarchical one) together. A job that never
// passes a GPU tensor never initialises NCCL.
//
// Threading: background thread only. Shutdown: the destructor drains hvd's stream and destroys the
// communicators; it must run before the CudaContext is destroyed (MPI is no longer needed).

#include <nccl.h>

#include <map>
#include <string>
#include <utility>

#include "hvd/tensor.h"
#include "ops/cuda/cuda_context.h"
#include "comm/mpi_context.h"

namespace hvd::ops::nccl {

// Throws CommunicationError naming the call, the rank, NCCL's error string and last error
// message, the NCCL version, and the file and line.
[[noreturn]] void throw_nccl_error(const char* call, ncclResult_t rc, const char* file, int line);

#define NCCL_CHECK(call)                                                           \
  do {                                                                             \
    ncclResult_t hvd_nccl_rc_ = (call);                                            \
    if (hvd_nccl_rc_ != ncclSuccess)                                               \
      ::hvd::ops::nccl::throw_nccl_error(#call, hvd_nccl_rc_, __FILE__, __LINE__); \
  } while (0)

// "NCCL 2.28.3".
std::string nccl_version_string();

ncclDataType_t nccl_type(DataType dtype);
// kAverage maps to ncclSum: the ops divide with the scale kernel (see ops/nccl/allreduce.cc).
ncclRedOp_t nccl_op(ReduceOp op);

class NcclContext {
 public:
  NcclContext(const comm::MpiContext& mpi, cuda::CudaContext& cuda) : mpi_(mpi), cuda_(cuda) {}
  ~NcclContext();
  NcclContext(const NcclContext&) = delete;
  NcclContext& operator=(const NcclContext&) = delete;

  // Each communicator is created on its first use, collectively, and that first use must come
  // before any ncclGroupStart(): ncclCommInitRank inside a group is deferred to the group's end,
  // so the group's calls would meet a communicator that has no ranks yet (NCCL: "invalid root 0
  // (root should be in the 0..0 range)", or a crash). An op that groups its calls takes the
  // communicator first.
  ncclComm_t world() { return get(world_, mpi_.world(), "world"); }
  ncclComm_t local() { return get(local_, mpi_.local(), "local"); }
  ncclComm_t cross() { return get(cross_, mpi_.cross(), "cross"); }
  // The communicator of two ranks of world() (`a` != `b`, this rank one of them), for send/recv:
  // created by those two alone, on their first exchange (the others do not take part in it, so it
  // cannot be world(), which is created by every rank), then kept. Rank 0 of the pair is the lower
  // one. PyTorch's ProcessGroupNCCL makes its send/recv communicators the same way.
  ncclComm_t pair(int a, int b);

  const comm::MpiContext& mpi() const { return mpi_; }
  cuda::CudaContext& cuda() { return cuda_; }

 private:
  ncclComm_t get(ncclComm_t& slot, MPI_Comm comm, const char* what);

  const comm::MpiContext& mpi_;
  cuda::CudaContext& cuda_;
  ncclComm_t world_ = nullptr, local_ = nullptr, cross_ = nullptr;
  std::map<std::pair<int, int>, ncclComm_t> pairs_;  // by (lower, higher) rank of world()
};

}  // namespace hvd::ops::nccl
