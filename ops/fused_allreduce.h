#pragma once

// The all-reduce skeleton every backend shares; a backend writes only its reduction.
//
//   one tensor (when the backend and the memory allow it): reduced straight from the caller's input
//     into its output, so the common unfused case adds no copy: a prescale is applied while copying
//     input to output (then the reduction runs in place), the postscale (and 1/contributors for
//     kAverage) in one pass afterwards;
//   otherwise (several tensors, HVD_COMPRESSION, a backend that needs padding): the batch is packed
//     into the fusion buffer with the prescale applied while packing (cast to the 16-bit wire dtype
//     under compression), reduced there in place, and unpacked with the postscale applied while
//     unpacking: pack, reduce, unpack, each byte touched three times.
//
// Zero-size tensors are never touched; a batch with no elements reduces nothing (every rank agrees,
// since the shapes are negotiated). A joined rank's stand-ins are ordinary entries (the identity of
// the op); the device memory copies host stand-ins to and from the device.
//
// The Memory policy says where the tensors and the fusion buffer live and how they are copied and
// scaled: HostMemory (ops/host_memory.h: scale_copy into the host FusionBuffer, and the 16-bit
// casts of compression) and, in the CUDA build only, cuda::DeviceMemory (ops/cuda/device_memory.h:
// batched copy kernels and the scale kernel on hvd's stream). A policy provides
//
//   static constexpr bool kTraceCopies;  // mark MEMCPY_IN/OUT_FUSION_BUFFER on the timeline
//   bool holds(const OpBatch&) const;    // is every input and output in this memory?
//   void scale(DataType, const void* src, void* dst, int64_t n, double factor);
//                                        // dst = src * factor; src == dst with factor 1: nothing
//   PackedBatch pack(const OpBatch&, DataType packed_dtype, int64_t parts, double prescale);
//   void unpack(OpBatch&, const PackedBatch&, double factor);
//
// `Base` is the backend's op class (CollectiveOp, mpi::MpiOp, nccl::NcclOp): the template adds the
// skeleton to it; its constructor arguments follow the memory policy's.

#include <cstdint>
#include <optional>
#include <utility>

#include "hvd/tensor.h"
#include "ops/collective_op.h"
#include "ops/fusion_buffer.h"

namespace hvd::ops {

// A batch packed into a fusion buffer.
struct PackedBatch {
  void* data = nullptr;
  int64_t count = 0;  // elements of `dtype` to reduce, padding included
  DataType dtype = DataType::kFloat32;
  FusionLayout layout;  // where each entry starts, in bytes
};

template <class Memory, class Base = CollectiveOp>
class FusedAllreduce : public Base {
 public:
  template <class... BaseArgs>
  explicit FusedAllreduce(Memory memory, BaseArgs&&... base_args)
      : Base(std::forward<BaseArgs>(base_args)...), memory_(std::move(memory)) {}

  CollectiveType type() const override { return CollectiveType::kAllreduce; }

  void execute(OpBatch& batch) override {
    const double post = post_factor(batch);
    const DataType packed = packed_dtype(batch);
    if (batch.entries.size() == 1 && packed == batch.dtype && reduce_directly(batch) &&
        memory_.holds(batch)) {
      OpEntry& e = batch.entries[0];
      const int64_t n = elements(e.output);
      if (n == 0) return;
      const void* in = e.input.data();
      void* out = e.output.data();
      if (batch.prescale != 1.0) {
        memory_.scale(batch.dtype, in, out, n, batch.prescale);
        in = out;
      }
      const double left = reduce(in, out, n, batch.dtype, batch, post);
      memory_.scale(batch.dtype, out, out, n, left);
      return;
    }
    PackedBatch p;
    {
      Trace trace(batch, "MEMCPY_IN_FUSION_BUFFER");
      p = memory_.pack(batch, packed, parts(batch, packed), batch.prescale);
    }
    const double left = p.count > 0 ? reduce(p.data, p.data, p.count, p.dtype, batch, post) : post;
    Trace trace(batch, "MEMCPY_OUT_FUSION_BUFFER");
    memory_.unpack(batch, p, left);
  }

 protected:
  // The backend's reduction across the ranks: `count` elements of `dtype` (the batch's dtype, or
  // packed_dtype() in the fusion buffer) from `in` into `out`; in == out: in place, which is always
  // the case in the fusion buffer. `post` is the factor the result still needs (postscale, divided
  // by the contributors for kAverage); a backend may fold all or part of it into its own rounding
  // and returns the factor left to apply (usually `post`).
  virtual double reduce(const void* in, void* out, int64_t count, DataType dtype,
                        const OpBatch& batch, double post) = 0;
  // The dtype the fusion buffer holds: the batch's (default), or a 16-bit wire dtype into which the
  // host memory casts while packing (HVD_COMPRESSION). A batch packed as another dtype is never
  // reduced directly.
  virtual DataType packed_dtype(const OpBatch& batch) const { return batch.dtype; }
  // Whether a batch of one tensor may be reduced straight from its input into its output.
  virtual bool reduce_directly(const OpBatch&) const { return true; }
  // The packed element count is padded to a multiple of this (the padding is reduced like data and
  // never copied out).
  virtual int64_t parts(const OpBatch&, DataType /*packed*/) const { return 1; }

  Memory memory_;

 private:
  // A timeline phase around a copy, when the memory's copies are synchronous.
  struct Trace {
    Trace(const OpBatch& batch, const char* activity) {
      if constexpr (Memory::kTraceCopies) scope.emplace(batch, activity);
    }
    std::optional<TraceScope> scope;
  };
};

}  // namespace hvd::ops
