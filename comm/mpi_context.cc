#include "comm/mpi_context.h"

#include <sched.h>

#include <algorithm>
#include <cctype>
#include <sstream>
#include <thread>
#include <vector>

#include "cluster/cores.h"

#include "hvd/config.h"
#include "hvd/error.h"
#include "common/dtype_math.h"
#include "common/logging.h"

namespace hvd::comm {

std::recursive_mutex& mpi_progress_mutex() {
  static std::recursive_mutex mu;
  return mu;
}

void enter_mpi_progress_scope() {
  mpi_progress_mutex().lock();
  if constexpr (kThreadSanitizer) __tsan_ignore_thread_begin();
}

void leave_mpi_progress_scope() {
  if constexpr (kThreadSanitizer) __tsan_ignore_thread_end();
  mpi_progress_mutex().unlock();
}

namespace {

template <DataType D, ReduceOp O>
void half_reduce(void* in, void* inout, int* len, MPI_Datatype*) {
  reduce_buffers(D, O, in, inout, static_cast<std::size_t>(*len));
}

using UserFn = void (*)(void*, void*, int*, MPI_Datatype*);

template <DataType D>
UserFn half_fn(int i) {
  switch (i) {
    case 0:
      return &half_reduce<D, ReduceOp::kSum>;
    case 1:
      return &half_reduce<D, ReduceOp::kMin>;
    case 2:
      return &half_reduce<D, ReduceOp::kMax>;
    default:
      return &half_reduce<D, ReduceOp::kProduct>;
  }
}

int op_index(ReduceOp op) {
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum:
      return 0;
    case ReduceOp::kMin:
      return 1;
    case ReduceOp::kMax:
      return 2;
    case ReduceOp::kProduct:
      return 3;
  }
  return 0;
}

}  // namespace

void throw_mpi_error(const char* call, int code, const char* file, int line) {
  char msg[MPI_MAX_ERROR_STRING] = {0};
  int len = 0;
  MPI_Error_string(code, msg, &len);
  char lib[MPI_MAX_LIBRARY_VERSION_STRING] = {0};
  int liblen = 0;
  MPI_Get_library_version(lib, &liblen);
  std::string libs(lib, static_cast<size_t>(liblen));
  if (auto nl = libs.find_first_of("\n,"); nl != std::string::npos) libs.resize(nl);
  int rank = -1;
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  if (inited && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  std::ostringstream s;
  s << call << " failed on rank " << rank << ": " << msg << " (MPI error " << code << ", " << libs
    << ", " << base << ":" << line
    << "). A peer process may have died or the network failed; see the other ranks' logs.";
  throw CommunicationError(s.str());
}

MpiContext::MpiContext(int fake_local_size, MPI_Comm base) {
  MPI_CHECK(MPI_Comm_dup(base, &world_));
  MPI_CHECK(MPI_Comm_set_errhandler(world_, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(world_, &topo_.rank));
  MPI_CHECK(MPI_Comm_size(world_, &topo_.size));
  if (fake_local_size > 0) {
    MPI_CHECK(MPI_Comm_split(world_, topo_.rank / fake_local_size, topo_.rank, &local_));
  } else {
    MPI_CHECK(
        MPI_Comm_split_type(world_, MPI_COMM_TYPE_SHARED, topo_.rank, MPI_INFO_NULL, &local_));
  }
  MPI_CHECK(MPI_Comm_set_errhandler(local_, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(local_, &topo_.local_rank));
  MPI_CHECK(MPI_Comm_size(local_, &topo_.local_size));
  MPI_CHECK(MPI_Comm_split(world_, topo_.local_rank, topo_.rank, &cross_));
  MPI_CHECK(MPI_Comm_set_errhandler(cross_, MPI_ERRORS_RETURN));
  MPI_CHECK(MPI_Comm_rank(cross_, &topo_.cross_rank));
  MPI_CHECK(MPI_Comm_size(cross_, &topo_.cross_size));
  std::vector<int> local_sizes(static_cast<size_t>(topo_.size));
  MPI_CHECK(MPI_Allgather(&topo_.local_size, 1, MPI_INT, local_sizes.data(), 1, MPI_INT, world_));
  topo_.homogeneous = true;
  for (int s : local_sizes) topo_.homogeneous = topo_.homogeneous && s == local_sizes[0];
  // Every rank's CPU mask on this node: how many cores this rank may count as its own.
  cpu_set_t mine;
  CPU_ZERO(&mine);
  if (sched_getaffinity(0, sizeof mine, &mine) != 0) {
    const int n = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
    for (int c = 0; c < n && c < CPU_SETSIZE; ++c) CPU_SET(c, &mine);
  }
  std::vector<cpu_set_t> masks(static_cast<size_t>(topo_.local_size));
  MPI_CHECK(
      MPI_Allgather(&mine, sizeof mine, MPI_BYTE, masks.data(), sizeof mine, MPI_BYTE, local_));
  topo_.cores_per_rank = cluster::cores_per_rank(mine, masks);

  MPI_CHECK(MPI_Type_contiguous(2, MPI_BYTE, &half_type_));
  MPI_CHECK(MPI_Type_commit(&half_type_));
  for (int i = 0; i < 4; ++i) {
    MPI_CHECK(MPI_Op_create(half_fn<DataType::kFloat16>(i), 1, &half_ops_[0][i]));
    MPI_CHECK(MPI_Op_create(half_fn<DataType::kBFloat16>(i), 1, &half_ops_[1][i]));
  }
}

MpiContext::~MpiContext() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  for (auto& row : half_ops_)
    for (auto& op : row)
      if (op != MPI_OP_NULL && op != MPI_Op{}) MPI_Op_free(&op);
  if (half_type_ != MPI_DATATYPE_NULL) MPI_Type_free(&half_type_);
  for (MPI_Comm* c : {&cross_, &local_, &world_})
    if (*c != MPI_COMM_NULL) MPI_Comm_free(c);
}

void MpiContext::set_compression(Compression c) {
  compression_ = c;
  if (topo_.rank == 0)
    HVD_LOG(Debug) << "all-reduce compression (HVD_COMPRESSION): " << compression_name(c);
}

MPI_Datatype MpiContext::datatype(DataType dtype) const {
  switch (dtype) {
    case DataType::kUInt8:
      return MPI_UINT8_T;
    case DataType::kInt8:
      return MPI_INT8_T;
    case DataType::kInt32:
      return MPI_INT32_T;
    case DataType::kInt64:
      return MPI_INT64_T;
    case DataType::kFloat16:
    case DataType::kBFloat16:
      return half_type_;
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
  }
  throw InvalidArgumentError("no MPI datatype for dtype " +
                             std::to_string(static_cast<int>(dtype)));
}

MPI_Op MpiContext::op(DataType dtype, ReduceOp op) const {
  if (dtype == DataType::kFloat16) return half_ops_[0][op_index(op)];
  if (dtype == DataType::kBFloat16) return half_ops_[1][op_index(op)];
  switch (op) {
    case ReduceOp::kAverage:
    case ReduceOp::kSum:
      return MPI_SUM;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
    case ReduceOp::kProduct:
      return MPI_PROD;
  }
  return MPI_SUM;
}

}  // namespace hvd::comm
