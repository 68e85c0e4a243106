// Allreduce over NCCL.
//
// One tensor on the device: reduced straight from the caller's input into its output (in place
// when they are the same), so the common unfused case adds no copy. A prescale is applied by the
// scale kernel while copying input to output; the postscale (and 1/contributors for kAverage)
// by the scale kernel afterwards.
// A fused batch: packed into the device fusion buffer by one batched copy kernel, prescaled,
// reduced by one ncclAllReduce, postscaled, unpacked by one batched copy kernel: four launches and
// one NCCL call for any number of tensors.
//
// Why kAverage is ncclSum plus the scale kernel rather than ncclAvg: ncclAvg pre-multiplies each
// contribution by 1/n, which rounds differently from summing and dividing once; the scale kernel
// gives the same bits as the CPU path (common/dtype_math.h) for every dtype, integers included, and
// costs one pass over data that is already in L2 for small tensors.
//
// fp16 compression (HVD_COMPRESSION=fp16): float32 sums and averages are cast to float16 in the
// fusion buffer's shadow (scratch), reduced as float16 (half the bytes on the wire), and cast back
// with the postscale folded into the cast. Other dtypes and ops are never compressed.
#include <algorithm>

#include "ops/cuda/device_layout.h"
#include "ops/cuda/kernels.h"
#include "ops/nccl/nccl_ops.h"

namespace hvd::ops::nccl {

void* pack_fused(NcclContext& ctx, const OpBatch& batch, int parts, int64_t* elements) {
  cuda::CudaContext& cu = ctx.cuda();
  cudaStream_t s = cu.stream();
  std::vector<int64_t> sizes;
  sizes.reserve(batch.entries.size());
  for (const auto& e : batch.entries) sizes.push_back(static_cast<int64_t>(e.input.size_bytes()));
  const auto d =
      cuda::device_fusion_layout(sizes, static_cast<int64_t>(dtype_size(batch.dtype)), parts);
  char* buf = static_cast<char*>(
      cu.fusion_buffer().get(static_cast<size_t>(std::max<int64_t>(d.bytes, 1)), s));
  std::vector<cuda::CopyDescriptor> descs;
  int64_t max_bytes = 0;
  for (size_t i = 0; i < batch.entries.size(); ++i) {
    const TensorRef& in = batch.entries[i].input;
    const int64_t bytes = sizes[i];
    if (bytes == 0) continue;
    char* dst = buf + d.layout.offsets[i];
    if (in.device().kind == Device::kCUDA) {
      descs.push_back({in.data(), dst, bytes});
      max_bytes = std::max(max_bytes, bytes);
    } else {
      CUDA_CHECK(
          cudaMemcpyAsync(dst, in.data(), static_cast<size_t>(bytes), cudaMemcpyHostToDevice, s));
    }
  }
  if (!descs.empty()) {
    // A pageable host-to-device copy is staged by the driver before cudaMemcpyAsync returns, so the
    // vector may go out of scope at once; the device array is reused in stream order.
    const size_t dbytes = descs.size() * sizeof(cuda::CopyDescriptor);
    auto* dd = static_cast<cuda::CopyDescriptor*>(cu.descriptors().get(dbytes, s));
    CUDA_CHECK(cudaMemcpyAsync(dd, descs.data(), dbytes, cudaMemcpyHostToDevice, s));
    cuda::batched_copy(dd, static_cast<int>(descs.size()), max_bytes, s);
  }
  *elements = d.elements;
  return buf;
}

void unpack_fused(NcclContext& ctx, OpBatch& batch, const void* buffer) {
  cuda::CudaContext& cu = ctx.cuda();
  cudaStream_t s = cu.stream();
  std::vector<int64_t> sizes;
  sizes.reserve(batch.entries.size());
  for (const auto& e : batch.entries) sizes.push_back(static_cast<int64_t>(e.output.size_bytes()));
  const auto layout = fusion_layout(sizes, cuda::kDeviceFusionAlignment);
  const char* buf = static_cast<const char*>(buffer);
  std::vector<cuda::CopyDescriptor> descs;
  int64_t max_bytes = 0;
  for (size_t i = 0; i < batch.entries.size(); ++i) {
    const TensorRef& out = batch.entries[i].output;
    const int64_t bytes = sizes[i];
    if (bytes == 0) continue;
    const char* src = buf + layout.offsets[i];
    if (out.device().kind == Device::kCUDA) {
      descs.push_back({src, out.data(), bytes});
      max_bytes = std::max(max_bytes, bytes);
    } else {
      // A joined rank's stand-in: a pageable destination makes this copy synchronous.
      CUDA_CHECK(
          cudaMemcpyAsync(out.data(), src, static_cast<size_t>(bytes), cudaMemcpyDeviceToHost, s));
    }
  }
  if (!descs.empty()) {
    const size_t dbytes = descs.size() * sizeof(cuda::CopyDescriptor);
    auto* dd = static_cast<cuda::CopyDescriptor*>(cu.descriptors().get(dbytes, s));
    CUDA_CHECK(cudaMemcpyAsync(dd, descs.data(), dbytes, cudaMemcpyHostToDevice, s));
    cuda::batched_copy(dd, static_cast<int>(descs.size()), max_bytes, s);
  }
}

void NcclAllreduce::execute(OpBatch& batch) {
  begin(batch);
  const double post = post_factor(batch);
  const bool compress =
      options_.fp16_compression && batch.dtype == DataType::kFloat32 &&
      (batch.reduce_op == ReduceOp::kSum || batch.reduce_op == ReduceOp::kAverage);
  bool all_device = true;
  for (const auto& e : batch.entries)
    all_device = all_device && e.input.device().kind == Device::kCUDA &&
                 e.output.device().kind == Device::kCUDA;
  if (batch.entries.size() == 1 && all_device && !compress) {
    OpEntry& e = batch.entries[0];
    const int64_t n = e.output.num_elements();
    if (n > 0) {
      const void* in = e.input.data();
      void* out = e.output.data();
      if (batch.prescale != 1.0) {
        cuda::scale(batch.dtype, in, out, n, batch.prescale, stream());
        in = out;
      }
      NCCL_CHECK(ncclAllReduce(in, out, static_cast<size_t>(n), nccl_type(batch.dtype),
                               nccl_op(batch.reduce_op), ctx_.world(), stream()));
      cuda::scale(batch.dtype, out, out, n, post, stream());
    }
  } else {
    execute_fused(batch, post);
  }
  end();
}

void NcclAllreduce::execute_fused(OpBatch& batch, double post) {
  const bool compress =
      options_.fp16_compression && batch.dtype == DataType::kFloat32 &&
      (batch.reduce_op == ReduceOp::kSum || batch.reduce_op == ReduceOp::kAverage);
  int64_t n = 0;
  void* buf = pack_fused(ctx_, batch, 1, &n);
  if (n > 0) {
    cuda::scale(batch.dtype, buf, buf, n, batch.prescale, stream());
    if (compress) {
      auto* half =
          static_cast<uint16_t*>(ctx_.cuda().scratch().get(static_cast<size_t>(n) * 2, stream()));
      cuda::cast_to_half(static_cast<const float*>(buf), half, n, 1.0, stream());
      NCCL_CHECK(ncclAllReduce(half, half, static_cast<size_t>(n), ncclFloat16, ncclSum,
                               ctx_.world(), stream()));
      cuda::cast_from_half(half, static_cast<float*>(buf), n, post, stream());
    } else {
      NCCL_CHECK(ncclAllReduce(buf, buf, static_cast<size_t>(n), nccl_type(batch.dtype),
                               nccl_op(batch.reduce_op), ctx_.world(), stream()));
      cuda::scale(batch.dtype, buf, buf, n, post, stream());
    }
  }
  unpack_fused(ctx_, batch, buf);
}

}  // namespace hvd::ops::nccl
