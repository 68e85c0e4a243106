#pragma once

// The NCCL backend: every collective on CUDA tensors of this process's device, on hvd's stream.
// Each op
//   1. makes hvd's stream wait for the streams that produce its tensors (CUDA events, no host
//      synchronisation),
//   2. enqueues copies, kernels and NCCL calls on hvd's stream and returns,
//   3. records a completion event and hands it to the finalizer, which completes the handles
//      when it fires (ops/cuda/finalizer.h).
// Allgather, alltoall and reducescatter return host Tensors (the public API's owning Tensor is a
// CPU tensor), so those ops end with a device-to-host copy that the background thread waits for;
// allreduce and broadcast, the training hot path, never wait on the host.
//
// A rank that has joined contributes host stand-in tensors (the identity); the ops copy those to
// and from the device (rare, and synchronous for the device-to-host direction).

#include <vector>

#include "ops/collective_op.h"
#include "ops/cuda/device_memory.h"
#include "ops/cuda/finalizer.h"
#include "ops/fused_allreduce.h"
#include "ops/nccl/nccl_context.h"

namespace hvd::ops::nccl {

class NcclOp : public CollectiveOp {
 public:
  NcclOp(NcclContext& ctx, cuda::Finalizer& finalizer) : ctx_(ctx), finalizer_(finalizer) {}
  // Not a deterministic reduction (HVD_DETERMINISTIC): NCCL's order depends on the buffer's size
  // and an element's place in it; the staged MPI op reduces those in rank order.
  bool enabled(const OpBatch& batch) const override {
    return batch.device.kind == Device::kCUDA && !batch.deterministic;
  }

 protected:
  // Selects the device, checks that every CUDA tensor is on it, and makes hvd's stream wait for
  // the streams that produce the batch's tensors.
  void begin(const OpBatch& batch);
  // Records the completion event and hands it to the finalizer.
  void end();
  // The tensor's data on the device: its own pointer for a CUDA tensor, else a copy in `tmp`.
  const void* on_device(const TensorRef& t, cuda::DeviceBuffer& tmp);
  cudaStream_t stream() const { return ctx_.cuda().stream(); }

  NcclContext& ctx_;
  cuda::Finalizer& finalizer_;
};

struct NcclAllreduceOptions {
  // HVD_COMPRESSION=fp16: float32 sums and averages travel as float16 and are cast back.
  bool fp16_compression = false;
};

// The skeleton of ops/fused_allreduce.h on device memory, reduced by one ncclAllReduce.
class NcclAllreduce : public FusedAllreduce<cuda::DeviceMemory, NcclOp> {
 public:
  NcclAllreduce(NcclContext& ctx, cuda::Finalizer& finalizer, NcclAllreduceOptions options = {})
      : FusedAllreduce(cuda::DeviceMemory(ctx.cuda()), ctx, finalizer), options_(options) {}
  const char* name() const override { return "nccl_allreduce"; }
  void execute(OpBatch& batch) override;  // begin(), the skeleton, end()

 protected:
  double reduce(const void* in, void* out, int64_t count, DataType dtype, const OpBatch& batch,
                double post) override;
  // A compressed batch goes through the fusion buffer (its fp16 shadow lives in scratch).
  bool reduce_directly(const OpBatch& batch) const override { return !compressed(batch); }

 private:
  bool compressed(const OpBatch& batch) const;
  NcclAllreduceOptions options_;
};

class NcclAllgather : public NcclOp {
 public:
  using NcclOp::NcclOp;
  const char* name() const override { return "nccl_allgather"; }
  CollectiveType type() const override { return CollectiveType::kAllgather; }
  void execute(OpBatch& batch) override;
};

class NcclBroadcast : public NcclOp {
 public:
  using NcclOp::NcclOp;
  const char* name() const override { return "nccl_broadcast"; }
  CollectiveType type() const override { return CollectiveType::kBroadcast; }
  void execute(OpBatch& batch) override;
};

class NcclAlltoall : public NcclOp {
 public:
  using NcclOp::NcclOp;
  const char* name() const override { return "nccl_alltoall"; }
  CollectiveType type() const override { return CollectiveType::kAlltoall; }
  void execute(OpBatch& batch) override;
};

// Point-to-point: ncclSend at the sender, ncclRecv at the receiver, on the pair's communicator
// (NcclContext::pair). Enabled for CUDA tensors, as the other NCCL ops.
class NcclSendRecv : public NcclOp {
 public:
  using NcclOp::NcclOp;
  const char* name() const override { return "nccl_sendrecv"; }
  CollectiveType type() const override { return CollectiveType::kSendRecv; }
  void execute(OpBatch& batch) override;
};

class NcclReducescatter : public NcclOp {
 public:
  using NcclOp::NcclOp;
  const char* name() const override { return "nccl_reducescatter"; }
  CollectiveType type() const override { return CollectiveType::kReducescatter; }
  void execute(OpBatch& batch) override;
};

}  // namespace hvd::ops::nccl
