#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "hvd/tensor.h"

namespace hvd {

namespace detail {
struct HandleState;
}

// An operation in flight. Cheap to copy (copies share the operation). ready() never blocks;
// wait() blocks until the operation is complete and throws hvd::Error if it failed, with the same
// message on every rank that took part. output() is the result of allgather, alltoall and
// reducescatter (valid after wait()). Handles may be waited on from any thread.
class Handle {
 public:
  Handle() = default;
  explicit Handle(std::shared_ptr<detail::HandleState> state) : state_(std::move(state)) {}

  bool valid() const { return state_ != nullptr; }
  bool ready() const;
  void wait();
  Tensor& output();
  // The first-dimension sizes received from each rank (alltoall), after wait().
  const std::vector<int64_t>& received_splits() const;

 private:
  std::shared_ptr<detail::HandleState> state_;
};

// Tensor names: 1 to kMaxNameBytes bytes, no NUL byte, not starting with kReservedNamePrefix
// (hvd's own barrier and join). A bad name throws hvd::InvalidArgumentError at once.
inline constexpr std::size_t kMaxNameBytes = 1024;
inline constexpr const char* kReservedNamePrefix = "__hvd.";

// The core collectives. Every rank calls each with the same name; ranks may call them in different
// orders (names identify tensors). The name must not be in flight already on this rank.
// Bad arguments of one rank (a null pointer, a negative or overflowing shape, an output that does
// not match or partly overlaps its input, a bad root or splits, ...) fail the operation on every
// rank with one message from Handle::wait(); docs/errors.md lists them all.
// allreduce: out = postscale * reduce_op(prescale * in over ranks); kAverage divides by the number
// of ranks that contributed (ranks that called join() contribute the identity of the op).
Handle allreduce_async(TensorRef in, TensorRef out, const std::string& name,
                       ReduceOp op = ReduceOp::kAverage, double prescale = 1.0,
                       double postscale = 1.0);
// All tensors of a group are negotiated and reduced together (one fused operation).
Handle grouped_allreduce_async(std::vector<TensorRef> in, std::vector<TensorRef> out,
                               const std::string& name, ReduceOp op = ReduceOp::kAverage);
// Concatenation along the first dimension in rank order; the first dimension may differ per rank.
Handle allgather_async(TensorRef in, const std::string& name);
// inout on `root` is copied to inout on every other rank.
Handle broadcast_async(TensorRef inout, int root, const std::string& name);
// splits[r] rows of the first dimension go to rank r (splits.size() == size(), summing to
// in.shape()[0]); an empty splits vector means equal parts. The result holds the rows received,
// in rank order.
Handle alltoall_async(TensorRef in, std::vector<int64_t> splits, const std::string& name);
// Reduces over ranks, then rank r keeps its block of the first dimension: blocks as even as
// possible, the first (rows % size) ranks one row larger.
Handle reducescatter_async(TensorRef in, const std::string& name, ReduceOp op = ReduceOp::kAverage);
// Point-to-point: `in` on this rank goes to `out` on rank `dst`, which calls recv(out, <this
// rank>, tag). A send and a receive pair up by (sender, receiver, tag), in the order each rank
// calls them (as MPI's do); sends with different tags, or to different ranks, may be in flight at
// once. The receive buffer must have the sent dtype and shape: otherwise both ranks' operations
// fail with one message (never truncated data). A send to itself, or to a rank that does not
// exist, throws InvalidArgumentError at once. CPU tensors over MPI; CUDA tensors host-staged.
Handle send_async(TensorRef in, int dst, int tag = 0);
Handle recv_async(TensorRef out, int src, int tag = 0);
inline void synchronize(Handle& h) { h.wait(); }

// Blocking forms on a TensorRef: each is its ..._async() call followed by Handle::wait(), so it
// returns once the operation is complete and throws hvd::Error (the same message on every rank) if
// it failed; names, arguments and checks are those of the async form. allgather, alltoall and
// reducescatter return their result as an owning Tensor. (A std::vector argument still picks the
// std::vector templates below: a TensorRef is never made from a vector implicitly.)
//   hvd::TensorRef g(grad.data(), hvd::DataType::kFloat32, {128, 64});
//   hvd::allreduce(g, "grad");                               // in place, averaged
//   hvd::Tensor rows = hvd::allgather(g, "grad.rows");       // [128 * size(), 64]
// In place: inout = postscale * op over ranks of (prescale * inout).
void allreduce(TensorRef inout, const std::string& name, ReduceOp op = ReduceOp::kAverage,
               double prescale = 1.0, double postscale = 1.0);
// Out of place: `in` is unchanged; `out` (same dtype and element count, not overlapping `in`)
// receives the result.
void allreduce(TensorRef in, TensorRef out, const std::string& name,
               ReduceOp op = ReduceOp::kAverage, double prescale = 1.0, double postscale = 1.0);
// One fused operation over the group, in place; members are named name.0, name.1, ...
void grouped_allreduce(std::vector<TensorRef> inout, const std::string& name,
                       ReduceOp op = ReduceOp::kAverage);
// One fused operation over the group, out of place: out[i] receives the result of in[i].
void grouped_allreduce(std::vector<TensorRef> in, std::vector<TensorRef> out,
                       const std::string& name, ReduceOp op = ReduceOp::kAverage);
// inout on `root` is copied to inout on every other rank.
void broadcast(TensorRef inout, int root, const std::string& name);
// The ranks' tensors concatenated along the first dimension, in rank order.
Tensor allgather(TensorRef in, const std::string& name);
// The rows received from every rank, in rank order (splits as for alltoall_async()). When
// `received_splits` is not null it receives the number of rows that came from each rank.
Tensor alltoall(TensorRef in, std::vector<int64_t> splits, const std::string& name,
                std::vector<int64_t>* received_splits = nullptr);
// This rank's block of the reduction (blocks as for reducescatter_async()).
Tensor reducescatter(TensorRef in, const std::string& name, ReduceOp op = ReduceOp::kAverage);
// send_async(...).wait(), recv_async(...).wait().
void send(TensorRef in, int dst, int tag = 0);
void recv(TensorRef out, int src, int tag = 0);
// Returns once every rank that has not called join() has called barrier(). Calls from several
// threads of one rank take turns.
void barrier();
// This rank has no more data: it contributes the identity to other ranks' collectives until every
// rank has joined. Returns the rank that joined last. While ranks have joined: allreduce and
// grouped allreduce reduce over the others (kAverage divides by the contributors), allgather
// gathers the others' rows, broadcast works from a root that has not joined, reducescatter reduces
// over the others, barrier releases the others, and alltoall fails on every caller
// (docs/architecture.md).
int join();

// Convenience for std::vector / std::span of arithmetic T (CPU memory).
template <class T>
TensorRef as_tensor(std::span<T> data) {
  return TensorRef(static_cast<void*>(const_cast<std::remove_const_t<T>*>(data.data())),
                   dtype_of<T>(), {static_cast<int64_t>(data.size())});
}

template <class T>
Handle allreduce_async(std::span<T> data, const std::string& name,
                       ReduceOp op = ReduceOp::kAverage) {
  TensorRef t = as_tensor(data);
  return allreduce_async(t, t, name, op);
}

template <class T>
void allreduce(std::vector<T>& data, const std::string& name, ReduceOp op = ReduceOp::kAverage) {
  Handle h = allreduce_async(std::span<T>(data), name, op);
  h.wait();
}

template <class T>
void broadcast(std::vector<T>& data, int root, const std::string& name) {
  Handle h = broadcast_async(as_tensor(std::span<T>(data)), root, name);
  h.wait();
}

template <class T>
std::vector<T> allgather(const std::vector<T>& data, const std::string& name) {
  Handle h = allgather_async(as_tensor(std::span<const T>(data)), name);
  h.wait();
  return h.output().template to_vector<T>();
}

template <class T>
std::vector<T> alltoall(const std::vector<T>& data, const std::vector<int64_t>& splits,
                        const std::string& name) {
  Handle h = alltoall_async(as_tensor(std::span<const T>(data)), splits, name);
  h.wait();
  return h.output().template to_vector<T>();
}

template <class T>
std::vector<T> reducescatter(const std::vector<T>& data, const std::string& name,
                             ReduceOp op = ReduceOp::kAverage) {
  Handle h = reducescatter_async(as_tensor(std::span<const T>(data)), name, op);
  h.wait();
  return h.output().template to_vector<T>();
}

}  // namespace hvd
