#pragma once

// What the GPU backends need from CUDA on this process's one device: CUDA_CHECK, a dedicated
// non-blocking stream on which hvd runs every copy, kernel and NCCL call, a pool of events,
// persistent stream-ordered device buffers (the device fusion buffer, scratch space, the
// descriptor array of the batched copy kernel) and a pinned host buffer for staging.
//
// Readiness and completion, without host synchronisation:
//   - wait_for(user_stream) records an event on the stream that produces a user's tensor and makes
//     hvd's stream wait for it (cudaStreamWaitEvent), so work queued afterwards reads the tensor
//     only after the producing kernels ran, while the host goes on.
//   - record_completion() records an event after everything queued for a batch; the finalizer
//     (ops/cuda/finalizer.h) completes the batch's handles when it fires.
//
// Lazy: constructing a context makes no CUDA call; the first activate() selects the device and
// creates the stream (and with them the device's primary context), so a process that never passes
// a CUDA tensor never creates a CUDA context, and nothing here touches a device other than
// device().
//
// Threading: created by the runtime at init(); used by the background thread (every method but
// events(), which the finalizer thread also uses and which is thread-safe). Each op calls
// activate() before anything else; stream() is valid after that.

#include <cuda_runtime_api.h>

#include <cstddef>
#include <mutex>
#include <string>
#include <vector>

namespace hvd::ops::cuda {

// Throws CommunicationError naming the call, the rank, CUDA's error name and string, the runtime
// and driver versions, and the file and line.
[[noreturn]] void throw_cuda_error(const char* call, cudaError_t code, const char* file, int line);

#define CUDA_CHECK(call)                                                           \
  do {                                                                             \
    cudaError_t hvd_cuda_rc_ = (call);                                             \
    if (hvd_cuda_rc_ != cudaSuccess)                                               \
      ::hvd::ops::cuda::throw_cuda_error(#call, hvd_cuda_rc_, __FILE__, __LINE__); \
  } while (0)

// "CUDA runtime 13.0, driver 13.0".
std::string cuda_version_string();

// The number of visible devices, 0 when CUDA reports none or fails (no driver): never throws, so
// that a CPU-only run on a machine without GPUs works.
int visible_device_count();

// Grow-only device memory, allocated and freed in stream order (cudaMallocAsync/cudaFreeAsync on
// the owning context's stream), so growing never synchronises the host and work already queued on
// that stream still sees the old allocation. Contents are unspecified after growing.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  void* get(std::size_t bytes, cudaStream_t stream);
  std::size_t capacity() const { return capacity_; }

 private:
  void* data_ = nullptr;
  std::size_t capacity_ = 0;
};

// Grow-only pinned (page-locked) host memory, for staging copies that run asynchronously.
// Growing synchronises `stream` first, since queued copies may still read the old buffer.
class PinnedBuffer {
 public:
  PinnedBuffer() = default;
  ~PinnedBuffer();
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  void* get(std::size_t bytes, cudaStream_t stream);

 private:
  void* data_ = nullptr;
  std::size_t capacity_ = 0;
};

// Reusable events (created with cudaEventDisableTiming). Thread-safe.
class EventPool {
 public:
  EventPool() = default;
  ~EventPool();
  EventPool(const EventPool&) = delete;
  EventPool& operator=(const EventPool&) = delete;
  cudaEvent_t acquire();
  void release(cudaEvent_t event);

 private:
  std::mutex mu_;
  std::vector<cudaEvent_t> free_;
};

class CudaContext {
 public:
  // Remembers `device`; no CUDA call.
  explicit CudaContext(int device);
  ~CudaContext();
  CudaContext(const CudaContext&) = delete;
  CudaContext& operator=(const CudaContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_; }
  // cudaSetDevice(device()) on the calling thread; the first call also creates the stream. Throws
  // CommunicationError when CUDA fails (no such device, no driver).
  void activate();

  // Makes stream() wait for the work queued so far on `user_stream` (a cudaStream_t as void*;
  // null: the legacy default stream). Asynchronous.
  void wait_for(void* user_stream);
  // Makes stream() wait for every distinct stream in `user_streams`.
  void wait_for_all(const std::vector<void*>& user_streams);
  // An event recorded on stream() after everything queued so far. The caller owns it and gives it
  // back to events() (the finalizer does).
  cudaEvent_t record_completion();

  EventPool& events() { return events_; }
  DeviceBuffer& fusion_buffer() { return fusion_; }
  DeviceBuffer& scratch() { return scratch_; }
  DeviceBuffer& descriptors() { return descriptors_; }
  PinnedBuffer& staging() { return staging_; }

 private:
  int device_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t ready_event_ = nullptr;  // reused: a wait captures the event's state when issued
  EventPool events_;
  DeviceBuffer fusion_, scratch_, descriptors_;
  PinnedBuffer staging_;
};

}  // namespace hvd::ops::cuda
