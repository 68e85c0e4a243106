#include "ops/nccl/nccl_context.h"

#include <algorithm>
#include <sstream>

#include "ops/nccl/nccl_ops.h"

#include "hvd/error.h"
#include "common/logging.h"

namespace hvd::ops::nccl {

std::string nccl_version_string() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "NCCL (unknown version)";
  // Since 2.9 the code is major * 10000 + minor * 100 + patch.
  return "NCCL " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

void throw_nccl_error(const char* call, ncclResult_t rc, const char* file, int line) {
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  int rank = -1, inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  std::ostringstream s;
  s << call << " failed on rank " << rank << ": " << ncclGetErrorString(rc);
  const char* last = ncclGetLastError(nullptr);
  if (last && *last) s << " (" << last << ")";
  s << " (" << nccl_version_string() << ", " << base << ":" << line << ").";
  if (rc == ncclInvalidUsage)
    s << " Two ranks on one GPU cannot share a NCCL communicator: start one rank per GPU or set "
         "HVD_GPU_OPERATIONS=MPI.";
  else if (rc == ncclSystemError || rc == ncclRemoteError)
    s << " A peer process may have died or the network failed; NCCL_DEBUG=INFO shows more.";
  throw CommunicationError(s.str());
}

ncclDataType_t nccl_type(DataType dtype) {
  switch (dtype) {
    case DataType::kUInt8:
      return ncclUint8;
    case DataType::kInt8:
      return ncclInt8;
    case DataType::kInt32:
      return ncclInt32;
    case DataType::kInt64:
      return ncclInt64;
    case DataType::kFloat16:
      return ncclFloat16;
    case DataType::kBFloat16:
      return ncclBfloat16;
    case DataType::kFloat32:
      return ncclFloat32;
    case DataType::kFloat64:
      return ncclFloat64;
  }
  throw InvalidArgumentError("no NCCL datatype for dtype " +
                             std::to_string(static_cast<int>(dtype)));
}

ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum:
      return ncclSum;
    case ReduceOp::kMin:
      return ncclMin;
    case ReduceOp::kMax:
      return ncclMax;
    case ReduceOp::kProduct:
      return ncclProd;
  }
  return ncclSum;
}

ncclComm_t NcclContext::get(ncclComm_t& slot, MPI_Comm comm, const char* what) {
  if (slot) return slot;
  int rank = 0, size = 1;
  MPI_CHECK(MPI_Comm_rank(comm, &rank));
  MPI_CHECK(MPI_Comm_size(comm, &size));
  ncclUniqueId id{};
  if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
  MPI_CHECK(MPI_Bcast(&id, sizeof(id), MPI_BYTE, 0, comm));
  cuda_.activate();
  NCCL_CHECK(ncclCommInitRank(&slot, size, id, rank));
  HVD_LOG(Debug) << "NCCL " << what << " communicator: rank " << rank << " of " << size
                 << " on cuda:" << cuda_.device() << " (" << nccl_version_string() << ")";
  return slot;
}

ncclComm_t NcclContext::pair(int a, int b) {
  const std::pair<int, int> key{std::min(a, b), std::max(a, b)};
  if (auto it = pairs_.find(key); it != pairs_.end()) return it->second;
  const int me = mpi_.topology().rank;
  const int other = me == key.first ? key.second : key.first;
  // The two meet here in the same response (the executor runs it on both), and hvd's communicator
  // carries nothing else at that moment (ops/mpi/sendrecv.cc).
  constexpr int kPairIdTag = 0x5e4e;
  ncclUniqueId id{};
  if (me == key.first) {
    NCCL_CHECK(ncclGetUniqueId(&id));
    MPI_CHECK(MPI_Send(&id, sizeof(id), MPI_BYTE, other, kPairIdTag, mpi_.world()));
  } else {
    MPI_CHECK(
        MPI_Recv(&id, sizeof(id), MPI_BYTE, other, kPairIdTag, mpi_.world(), MPI_STATUS_IGNORE));
  }
  cuda_.activate();
  ncclComm_t comm = nullptr;
  NCCL_CHECK(ncclCommInitRank(&comm, 2, id, me == key.first ? 0 : 1));
  HVD_LOG(Debug) << "NCCL send/recv communicator of ranks " << key.first << " and " << key.second
                 << " on cuda:" << cuda_.device();
  pairs_.emplace(key, comm);
  return comm;
}

NcclContext::~NcclContext() {
  if (!world_ && !local_ && !cross_ && pairs_.empty()) return;  // NCCL (and CUDA) never used
  cudaSetDevice(cuda_.device());
  cudaStreamSynchronize(cuda_.stream());
  for (ncclComm_t* c : {&cross_, &local_, &world_})
    if (*c) {
      ncclCommDestroy(*c);
      *c = nullptr;
    }
  for (auto& [key, comm] : pairs_) ncclCommDestroy(comm);
  pairs_.clear();
}

// The helpers every NCCL op shares (nccl_ops.h).

void NcclOp::begin(const OpBatch& batch) {
  cuda::CudaContext& cu = ctx_.cuda();
  cu.activate();
  std::vector<void*> streams;
  for (const OpEntry& e : batch.entries) {
    for (const TensorRef* t : {&e.input, &e.output}) {
      if (t->device().kind != Device::kCUDA) continue;
      check_device(batch, e, *t, cu.device());
      streams.push_back(t->stream());
    }
  }
  cu.wait_for_all(streams);
}

void NcclOp::end() { finalizer_.set_pending(ctx_.cuda().record_completion()); }

const void* NcclOp::on_device(const TensorRef& t, cuda::DeviceBuffer& tmp) {
  if (t.device().kind == Device::kCUDA) return t.data();
  const size_t bytes = t.size_bytes();
  void* p = tmp.get(bytes > 0 ? bytes : 1, stream());
  if (bytes > 0) CUDA_CHECK(cudaMemcpyAsync(p, t.data(), bytes, cudaMemcpyHostToDevice, stream()));
  return p;
}

}  // namespace hvd::ops::nccl
