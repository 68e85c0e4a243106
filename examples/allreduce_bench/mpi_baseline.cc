// The raw-MPI baseline of allreduce_bench. It has its own MPI datatype table and 16-bit reduction
// ops (hvd's are in comm/mpi_context.cc) on purpose: the bench is an example, built on the public
// API only, and a baseline that shared hvd's internals could not show a bug in them.
#include "mpi_baseline.h"

#include <algorithm>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <string>

#include "elements.h"

namespace allreduce_bench {
namespace {

using hvd::DataType;
using hvd::ReduceOp;

void check_mpi(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  throw std::runtime_error(std::string(call) + " failed: " + std::string(text, len));
}

int as_mpi_count(int64_t count) {
  if (count > INT_MAX) {
    throw std::invalid_argument("message of " + std::to_string(count) +
                                " elements is too large for one MPI call (at most " +
                                std::to_string(INT_MAX) + "): lower -e or --tensors");
  }
  return static_cast<int>(count);
}

enum Fold { kFoldSum, kFoldProd, kFoldMin, kFoldMax };

// An MPI user function on 16-bit floats: inout[i] = fold(in[i], inout[i]) computed in float.
template <float (*Dec)(uint16_t), uint16_t (*Enc)(float), int kFold>
void fold_16(void* in, void* inout, int* len, MPI_Datatype*) {
  const uint16_t* a = static_cast<const uint16_t*>(in);
  uint16_t* b = static_cast<uint16_t*>(inout);
  for (int i = 0; i < *len; ++i) {
    const float x = Dec(a[i]), y = Dec(b[i]);
    float r;
    if constexpr (kFold == kFoldSum)
      r = x + y;
    else if constexpr (kFold == kFoldProd)
      r = x * y;
    else if constexpr (kFold == kFoldMin)
      r = std::min(x, y);
    else
      r = std::max(x, y);
    b[i] = Enc(r);
  }
}

template <float (*Dec)(uint16_t), uint16_t (*Enc)(float)>
void create_ops(MPI_Op ops[4]) {
  check_mpi(MPI_Op_create(&fold_16<Dec, Enc, kFoldSum>, 1, &ops[0]), "MPI_Op_create");
  check_mpi(MPI_Op_create(&fold_16<Dec, Enc, kFoldProd>, 1, &ops[1]), "MPI_Op_create");
  check_mpi(MPI_Op_create(&fold_16<Dec, Enc, kFoldMin>, 1, &ops[2]), "MPI_Op_create");
  check_mpi(MPI_Op_create(&fold_16<Dec, Enc, kFoldMax>, 1, &ops[3]), "MPI_Op_create");
}

int fold_index(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return kFoldSum;
    case ReduceOp::kProduct:
      return kFoldProd;
    case ReduceOp::kMin:
      return kFoldMin;
    case ReduceOp::kMax:
      return kFoldMax;
  }
  return kFoldSum;
}

}  // namespace

MpiBaseline::MpiBaseline(MPI_Comm comm) : comm_(comm) {
  check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
  create_ops<half_to_float, float_to_half>(half_ops_);
  create_ops<bfloat16_to_float, float_to_bfloat16>(bf16_ops_);
}

MpiBaseline::~MpiBaseline() {
  for (MPI_Op& op : half_ops_) MPI_Op_free(&op);
  for (MPI_Op& op : bf16_ops_) MPI_Op_free(&op);
}

MPI_Datatype MpiBaseline::mpi_type(DataType dtype) const {
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
      return MPI_UINT16_T;
    case DataType::kFloat32:
      return MPI_FLOAT;
    case DataType::kFloat64:
      return MPI_DOUBLE;
  }
  return MPI_BYTE;
}

MPI_Op MpiBaseline::mpi_op(DataType dtype, ReduceOp op) const {
  if (dtype == DataType::kFloat16) return half_ops_[fold_index(op)];
  if (dtype == DataType::kBFloat16) return bf16_ops_[fold_index(op)];
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAverage:
      return MPI_SUM;
    case ReduceOp::kProduct:
      return MPI_PROD;
    case ReduceOp::kMin:
      return MPI_MIN;
    case ReduceOp::kMax:
      return MPI_MAX;
  }
  return MPI_SUM;
}

void MpiBaseline::run_unfused(DataType dtype, ReduceOp op, const std::vector<void*>& in,
                              const std::vector<void*>& out, int64_t count) const {
  const int n = as_mpi_count(count);
  const MPI_Datatype type = mpi_type(dtype);
  const MPI_Op mop = mpi_op(dtype, op);
  for (std::size_t k = 0; k < in.size(); ++k) {
    const void* send = in[k] == out[k] ? MPI_IN_PLACE : in[k];
    check_mpi(MPI_Allreduce(send, out[k], n, type, mop, comm_), "MPI_Allreduce");
    if (op == ReduceOp::kAverage) divide(dtype, out[k], count, size_);
  }
}

void MpiBaseline::run_fused(DataType dtype, ReduceOp op, const std::vector<void*>& in,
                            const std::vector<void*>& out, int64_t count, void* fused) const {
  const std::size_t bytes = static_cast<std::size_t>(count) * hvd::dtype_size(dtype);
  const int64_t total = count * static_cast<int64_t>(in.size());
  char* buffer = static_cast<char*>(fused);
  if (bytes > 0)
    for (std::size_t k = 0; k < in.size(); ++k) std::memcpy(buffer + k * bytes, in[k], bytes);
  check_mpi(MPI_Allreduce(MPI_IN_PLACE, buffer, as_mpi_count(total), mpi_type(dtype),
                          mpi_op(dtype, op), comm_),
            "MPI_Allreduce");
  if (op == ReduceOp::kAverage) divide(dtype, buffer, total, size_);
  if (bytes > 0)
    for (std::size_t k = 0; k < out.size(); ++k) std::memcpy(out[k], buffer + k * bytes, bytes);
}

}  // namespace allreduce_bench
