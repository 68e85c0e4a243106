#pragma once

// Process sets: collectives and send/recv over a subset of the ranks (Horovod's process sets,
// PyTorch's new_group). A set negotiates and runs its operations on its own communicators, with
// its own queue, cache and coordinator (its rank 0): operations of different sets may be in flight
// at once, sets may overlap, and a set's operations involve its members only. The free functions
// of hvd/collectives.h are those of the global set (id 0, every rank).
//
//   hvd::ProcessSet even = hvd::add_process_set({0, 2});   // every rank calls it, same list
//   if (even.included()) even.allreduce(grad, "grad.even"); // ranks 0 and 2 only
//   hvd::remove_process_set(even);                          // every rank calls it
//
// add_process_set() and remove_process_set() are collective over every rank (the global set),
// in the same order on every rank, like Horovod's. A list that differs between ranks, a rank out of
// range or repeated, an empty list, or a list equal to an existing set's fails on every rank with
// one message. A set's collectives are those of hvd/collectives.h, same names and arguments, called
// by the set's members (a non-member's call throws hvd::InvalidArgumentError at once, as does a
// call on a removed set); a broadcast root is a global rank (as in Horovod), alltoall splits have
// one entry per member, send/recv peers are ranks of the set. Names are per set: "grad" in two sets
// are two operations. join() is the global set's alone. docs/process_sets.md has the details.

#include <memory>
#include <string>
#include <vector>

#include "hvd/collectives.h"

namespace hvd {

namespace detail {
struct ProcessSetInfo;
}

class ProcessSet {
 public:
  ProcessSet() = default;  // no set: id() is -1 and every operation throws InvalidArgumentError
  explicit ProcessSet(std::shared_ptr<const detail::ProcessSetInfo> info);

  int id() const;         // 0: the global set
  bool included() const;  // this rank is a member
  int rank() const;       // this rank's index in the set, -1 when not a member
  int size() const;
  const std::vector<int>& ranks() const;  // global ranks, ascending

  Handle allreduce_async(TensorRef in, TensorRef out, const std::string& name,
                         ReduceOp op = ReduceOp::kAverage, double prescale = 1.0,
                         double postscale = 1.0) const;
  Handle grouped_allreduce_async(std::vector<TensorRef> in, std::vector<TensorRef> out,
                                 const std::string& name, ReduceOp op = ReduceOp::kAverage) const;
  Handle allgather_async(TensorRef in, const std::string& name) const;
  Handle broadcast_async(TensorRef inout, int root, const std::string& name) const;
  Handle alltoall_async(TensorRef in, std::vector<int64_t> splits, const std::string& name) const;
  Handle reducescatter_async(TensorRef in, const std::string& name,
                             ReduceOp op = ReduceOp::kAverage) const;
  Handle send_async(TensorRef in, int dst, int tag = 0) const;
  Handle recv_async(TensorRef out, int src, int tag = 0) const;

  void allreduce(TensorRef inout, const std::string& name, ReduceOp op = ReduceOp::kAverage,
                 double prescale = 1.0, double postscale = 1.0) const;
  void allreduce(TensorRef in, TensorRef out, const std::string& name,
                 ReduceOp op = ReduceOp::kAverage, double prescale = 1.0,
                 double postscale = 1.0) const;
  void grouped_allreduce(std::vector<TensorRef> inout, const std::string& name,
                         ReduceOp op = ReduceOp::kAverage) const;
  void grouped_allreduce(std::vector<TensorRef> in, std::vector<TensorRef> out,
                         const std::string& name, ReduceOp op = ReduceOp::kAverage) const;
  void broadcast(TensorRef inout, int root, const std::string& name) const;
  Tensor allgather(TensorRef in, const std::string& name) const;
  Tensor alltoall(TensorRef in, std::vector<int64_t> splits, const std::string& name,
                  std::vector<int64_t>* received_splits = nullptr) const;
  Tensor reducescatter(TensorRef in, const std::string& name,
                       ReduceOp op = ReduceOp::kAverage) const;
  void send(TensorRef in, int dst, int tag = 0) const;
  void recv(TensorRef out, int src, int tag = 0) const;
  void barrier() const;

  template <class T>
  void allreduce(std::vector<T>& data, const std::string& name,
                 ReduceOp op = ReduceOp::kAverage) const {
    TensorRef t = as_tensor(std::span<T>(data));
    allreduce_async(t, t, name, op).wait();
  }
  template <class T>
  void broadcast(std::vector<T>& data, int root, const std::string& name) const {
    broadcast_async(as_tensor(std::span<T>(data)), root, name).wait();
  }
  template <class T>
  std::vector<T> allgather(const std::vector<T>& data, const std::string& name) const {
    Handle h = allgather_async(as_tensor(std::span<const T>(data)), name);
    h.wait();
    return h.output().template to_vector<T>();
  }

  friend bool operator==(const ProcessSet& a, const ProcessSet& b) { return a.id() == b.id(); }

 private:
  std::shared_ptr<const detail::ProcessSetInfo> info_;
};

ProcessSet global_process_set();
// Collective over every rank, in the same order everywhere: the same list on every rank (any
// order; global ranks). Returns the new set, also on ranks that are not members (included() false).
ProcessSet add_process_set(std::vector<int> ranks);
// Collective over every rank: the set's operations still queued fail, and its id is not reused.
void remove_process_set(const ProcessSet& set);
// The registered sets, the global set first.
std::vector<ProcessSet> process_sets();

}  // namespace hvd
