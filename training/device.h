#pragma once

// The training layer on CUDA tensors (docs/gpu.md, "The training layer on the device"). Strategy
// (gradient accumulation, the 16-bit gradient wire dtype), LossScaler (unscale and check) and
// Checkpointer (staging through pinned memory) call these for a TensorRef whose device is CUDA.
//
// Where: every call takes a Place, the tensor's device and stream (TensorRef::stream(); null is the
// legacy default stream). The work is queued on that stream, on that device (the calling thread's
// current device is set for the call and restored), and the call returns without waiting unless
// it says so. The element-wise math is common/cuda/device_math.h, the data path's own kernels.
//
// The entry points call require_device() for every tensor before anything else: a CUDA tensor
// that this process cannot reach (a build without CUDA, HVD_WITH_CUDA=OFF or no toolkit found; a
// device index that CUDA does not see) is an hvd::InvalidArgumentError naming the tensor, before
// any work is queued. A build without CUDA compiles the same interface. A CUDA error throws
// hvd::Error naming the call.
//
// Not thread-safe: the buffers belong to one Strategy, LossScaler or Checkpointer call.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "hvd/tensor.h"

namespace hvd::training {

struct Place {
  Device device;
  void* stream = nullptr;
};
inline Place place_of(const TensorRef& t) { return {t.device(), t.stream()}; }

// Nothing for a CPU tensor, or for a CUDA tensor on a device this process sees; otherwise throws
// hvd::InvalidArgumentError "<what> is on cuda:N, but ..." with the reason and the way out.
void require_device(const TensorRef& t, const std::string& what);

// Device memory on one device, grown on demand (the contents are undefined after a growth, which
// waits for the device: cudaMalloc). Move-only; freed on its device.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  ~DeviceBuffer();
  // At least `bytes` on `device` (a buffer on another device is freed first).
  void* get(Device device, std::size_t bytes);
  std::size_t size() const { return bytes_; }

 private:
  void release() noexcept;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  int device_ = -1;
};

// Page-locked host memory (cudaMallocHost), so that copies to and from the device are true
// asynchronous DMA. Move-only.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  PinnedBuffer(PinnedBuffer&& o) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;
  ~PinnedBuffer();
  void* get(std::size_t bytes);  // at least `bytes`; contents undefined after a growth

 private:
  void release() noexcept;
  void* data_ = nullptr;
  std::size_t bytes_ = 0;
};

// dst[i] += src[i] (n elements of dtype; common/cuda/device_math.h's accumulate).
void accumulate(Place at, DataType dtype, const void* src, void* dst, int64_t n);
// dst[i] = To(src[i] * factor) between float32 and float16/bfloat16 (device_math::cast).
void cast(Place at, DataType from, DataType to, const void* src, void* dst, int64_t n,
          double factor);
// `bytes` from src to dst, each in device or pinned host memory (the direction is inferred).
void copy(Place at, const void* src, void* dst, std::size_t bytes);
void zero(Place at, void* p, std::size_t bytes);
// Waits for everything queued on the stream so far.
void synchronize(Place at);

// Loss-scale unscaling of CUDA gradients for one step: unscale() queues g *= factor and the Inf/NaN
// check on g's stream; overflowed() waits for every stream used since the last call and says
// whether any element was Inf or NaN. One flag in device memory per device, zero between steps.
class OverflowCheck {
 public:
  void unscale(const TensorRef& g, double factor);
  bool overflowed();

 private:
  struct PerDevice {
    int device = -1;
    DeviceBuffer memory;         // holds the flag
    int32_t* flag = nullptr;     // one int32 in memory, zero between steps
    std::vector<void*> streams;  // used since the last overflowed()
  };
  PerDevice& on(Device device);
  std::vector<PerDevice> devices_;
};

}  // namespace hvd::training
