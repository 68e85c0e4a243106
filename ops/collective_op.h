#pragma once

// The data plane's contract. The runtime (control plane) decides what runs and hands an op one
// OpBatch: a single collective over one or more tensors (several only for fused allreduce), with
// parameters every rank has agreed on. The op moves the bytes and returns; it throws hvd::Error
// (usually CommunicationError) when a library call fails, and the runtime fails the batch's
// handles with that message.
//
// Every rank calls execute() for the same batches in the same order, so ops may issue blocking
// collectives. Ops run on the runtime's background thread only; they must not keep pointers to
// the batch after returning.
//
// Backends implement one class per collective and say whether they apply to a batch
// (enabled()); the OperationManager picks the first enabled backend in its documented order.

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "common/dtype.h"
#include "common/op_kind.h"
#include "hvd/error.h"
#include "hvd/tensor.h"

namespace hvd::ops {

// The data rows of common/op_kind.h, with the values RequestType and ResponseType give them.
#define HVD_OP_KIND_ENUMERATOR(kind, ...) kind,
enum class CollectiveType { HVD_DATA_OP_KINDS(HVD_OP_KIND_ENUMERATOR) };
#undef HVD_OP_KIND_ENUMERATOR
inline const char* collective_name(CollectiveType t) {
  const OpKindInfo* k = op_kind(static_cast<int>(t));
  return k ? k->name : "unknown";
}

struct OpEntry {
  std::string name;
  TensorRef input;   // allreduce/allgather/alltoall/reducescatter: what this rank sends
  TensorRef output;  // allreduce: where the result goes (may equal input); broadcast: in/out
  Tensor* result = nullptr;     // allgather/alltoall/reducescatter: the op allocates and fills it
  std::vector<int64_t> splits;  // alltoall: rows sent to each rank
  std::vector<int64_t>* received_splits = nullptr;  // alltoall: rows received from each rank
};

// Whether the op of this type writes OpEntry::result (and, for alltoall, received_splits).
constexpr bool makes_result(CollectiveType t) {
  const OpKindInfo* k = op_kind(static_cast<int>(t));
  return k && k->has(op_flags::kMakesResult);
}

struct OpBatch {
  CollectiveType type = CollectiveType::kAllreduce;
  DataType dtype = DataType::kFloat32;
  ReduceOp reduce_op = ReduceOp::kSum;
  Device device;
  int root = 0;   // broadcast: the root; send/recv: the sender
  int peer = -1;  // send/recv: the receiver (ranks of the communicator the op runs on)
  double prescale = 1.0;
  double postscale = 1.0;
  int contributors = 1;  // ranks contributing data; kAverage divides by it
  // HVD_DETERMINISTIC (hvd::set_deterministic): reduce every element in a fixed order, whatever its
  // place in the batch and the batch's size (ops/mpi/allreduce.cc).
  bool deterministic = false;
  std::vector<OpEntry> entries;
  std::vector<int64_t> first_dims;  // allgather: every rank's first dimension (one entry per batch)
  // Timeline hook: an op may mark phases inside itself ("MEMCPY_IN_FUSION_BUFFER", begin/end).
  // Empty when no timeline is written.
  std::function<void(const char* activity, bool begin)> trace;
};

// Marks a phase for the timeline for the lifetime of the scope (no-op without a timeline).
class TraceScope {
 public:
  TraceScope(const OpBatch& batch, const char* activity) : batch_(batch), activity_(activity) {
    if (batch_.trace) batch_.trace(activity_, true);
  }
  ~TraceScope() {
    if (batch_.trace) batch_.trace(activity_, false);
  }
  TraceScope(const TraceScope&) = delete;
  TraceScope& operator=(const TraceScope&) = delete;

 private:
  const OpBatch& batch_;
  const char* activity_;
};

class CollectiveOp {
 public:
  virtual ~CollectiveOp() = default;
  virtual const char* name() const = 0;  // "mpi_allreduce"
  virtual CollectiveType type() const = 0;
  virtual bool enabled(const OpBatch& batch) const = 0;
  virtual void execute(OpBatch& batch) = 0;
};

// The factor applied after the reduction: postscale, divided by the contributors for kAverage.
double post_factor(const OpBatch& batch);

// Elements of the tensor (TensorRef::num_elements, inline: the data plane asks it per entry).
inline int64_t elements(const TensorRef& t) {
  int64_t n = 1;
  for (int64_t d : t.shape()) n *= d;
  return n;
}

// Bytes of one row of the first dimension (the product of the other dimensions times the element
// size): allgather and alltoall move whole rows. A scalar is one row of one element.
inline int64_t row_bytes(const TensorRef& t) {
  const auto& shape = t.shape();
  int64_t elems = 1;
  for (size_t d = 1; d < shape.size(); ++d) elems *= shape[d];
  return elems * static_cast<int64_t>(dtypes::size(t.dtype()));
}

// The data plane's own check that a CUDA tensor of entry `e` is on this process's device `device`
// (the runtime's validation normally catches it first): throws InvalidArgumentError
// "<op> of '<name>' failed: the tensor is on cuda:1 but this process uses cuda:0 ...".
inline void check_device(const OpBatch& batch, const OpEntry& e, const TensorRef& t, int device) {
  if (t.device().kind != Device::kCUDA || t.device().index == device) return;
  throw InvalidArgumentError(std::string(collective_name(batch.type)) + " of '" + e.name +
                             "' failed: the tensor is on " + device_name(t.device()) +
                             " but this process uses " + device_name(Device::cuda(device)) +
                             " (local rank modulo the visible devices). Allocate it on that "
                             "device.");
}

}  // namespace hvd::ops
