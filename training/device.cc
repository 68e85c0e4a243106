// The training layer on CUDA tensors; see device.h. With the GPU stack (HVD_HAVE_CUDA) the calls
// below queue CUDA work; without it they are unreachable (require_device() refuses CUDA tensors
// first) and throw hvd::InternalError if reached.
#include "training/device.h"

#include <algorithm>
#include <string>
#include <utility>

#include "hvd/config.h"
#include "hvd/error.h"
#include "hvd/hvd.h"

#if HVD_HAVE_CUDA
#include <cuda_runtime_api.h>

#include "common/cuda/device_math.h"
#endif

namespace hvd::training {
namespace {
// "rank N" once hvd is initialised (the errors say where), "this process" before.
std::string who() { return initialized() ? "rank " + std::to_string(rank()) : "this process"; }
}  // namespace

#if HVD_HAVE_CUDA
namespace {

using device_math::check_cuda;

cudaStream_t stream_of(const Place& at) { return static_cast<cudaStream_t>(at.stream); }

// Makes `index` the calling thread's current device for the scope, and restores the previous one.
class DeviceScope {
 public:
  explicit DeviceScope(int index) {
    check_cuda(cudaGetDevice(&previous_), "cudaGetDevice");
    if (previous_ != index)
      check_cuda(cudaSetDevice(index), ("cudaSetDevice(" + std::to_string(index) + ")").c_str());
  }
  ~DeviceScope() {
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace

void require_device(const TensorRef& t, const std::string& what) {
  if (t.device().kind == Device::kCPU) return;
  // The devices this process sees, asked once (fixed for the process: CUDA_VISIBLE_DEVICES is read
  // at CUDA's initialisation); 0 when CUDA reports none or fails (no driver).
  static const int visible = [] {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0;
  }();
  if (t.device().index >= 0 && t.device().index < visible) return;
  throw InvalidArgumentError(what + " is on " + device_name(t.device()) + ", but " + who() +
                             " sees " + std::to_string(visible) +
                             " CUDA device(s): pass CPU tensors, or run where that GPU is visible "
                             "(CUDA_VISIBLE_DEVICES).");
}

void DeviceBuffer::release() noexcept {
  if (data_ == nullptr) return;
  int previous = 0;
  const bool got = cudaGetDevice(&previous) == cudaSuccess;
  if (cudaSetDevice(device_) == cudaSuccess) (void)cudaFree(data_);
  if (got) (void)cudaSetDevice(previous);
  data_ = nullptr;
  bytes_ = 0;
}

void* DeviceBuffer::get(Device device, std::size_t bytes) {
  if (data_ != nullptr && device.index == device_ && bytes <= bytes_) return data_;
  release();
  const DeviceScope scope(device.index);
  const std::size_t n = std::max<std::size_t>(bytes, 1);
  check_cuda(
      cudaMalloc(&data_, n),
      ("cudaMalloc(" + std::to_string(n) + " bytes on " + device_name(device) + ")").c_str());
  bytes_ = n;
  device_ = device.index;
  return data_;
}

void PinnedBuffer::release() noexcept {
  if (data_ != nullptr) (void)cudaFreeHost(data_);
  data_ = nullptr;
  bytes_ = 0;
}

void* PinnedBuffer::get(std::size_t bytes) {
  if (data_ != nullptr && bytes <= bytes_) return data_;
  release();
  const std::size_t n = std::max<std::size_t>(bytes, 1);
  check_cuda(cudaMallocHost(&data_, n),
             ("cudaMallocHost(" + std::to_string(n) + " bytes of pinned host memory)").c_str());
  bytes_ = n;
  return data_;
}

void accumulate(Place at, DataType dtype, const void* src, void* dst, int64_t n) {
  const DeviceScope scope(at.device.index);
  device_math::accumulate(dtype, src, dst, n, stream_of(at));
}

void cast(Place at, DataType from, DataType to, const void* src, void* dst, int64_t n,
          double factor) {
  const DeviceScope scope(at.device.index);
  device_math::cast(from, to, src, dst, n, factor, stream_of(at));
}

void copy(Place at, const void* src, void* dst, std::size_t bytes) {
  if (bytes == 0) return;
  const DeviceScope scope(at.device.index);
  check_cuda(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_of(at)), "cudaMemcpyAsync");
}

void zero(Place at, void* p, std::size_t bytes) {
  if (bytes == 0) return;
  const DeviceScope scope(at.device.index);
  check_cuda(cudaMemsetAsync(p, 0, bytes, stream_of(at)), "cudaMemsetAsync");
}

void synchronize(Place at) {
  const DeviceScope scope(at.device.index);
  check_cuda(cudaStreamSynchronize(stream_of(at)), "cudaStreamSynchronize");
}

OverflowCheck::PerDevice& OverflowCheck::on(Device device) {
  for (auto& d : devices_)
    if (d.device == device.index) return d;
  PerDevice d;
  d.device = device.index;
  d.flag = static_cast<int32_t*>(d.memory.get(device, sizeof(int32_t)));
  const DeviceScope scope(device.index);
  check_cuda(cudaMemset(d.flag, 0, sizeof(int32_t)), "cudaMemset (the overflow flag)");
  devices_.push_back(std::move(d));
  return devices_.back();
}

void OverflowCheck::unscale(const TensorRef& g, double factor) {
  PerDevice& d = on(g.device());
  const DeviceScope scope(g.device().index);
  device_math::scale_and_check(g.dtype(), g.data(), g.num_elements(), factor, d.flag,
                               static_cast<cudaStream_t>(g.stream()));
  if (std::find(d.streams.begin(), d.streams.end(), g.stream()) == d.streams.end())
    d.streams.push_back(g.stream());
}

bool OverflowCheck::overflowed() {
  bool any = false;
  for (auto& d : devices_) {
    if (d.streams.empty()) continue;
    const DeviceScope scope(d.device);
    for (void* s : d.streams)
      check_cuda(cudaStreamSynchronize(static_cast<cudaStream_t>(s)), "cudaStreamSynchronize");
    d.streams.clear();
    // Every kernel that could set the flag is done: read it and clear it for the next step.
    int32_t host = 0;
    check_cuda(cudaMemcpy(&host, d.flag, sizeof host, cudaMemcpyDeviceToHost),
               "cudaMemcpy (the overflow flag)");
    if (host != 0) {
      any = true;
      check_cuda(cudaMemset(d.flag, 0, sizeof(int32_t)), "cudaMemset (the overflow flag)");
    }
  }
  return any;
}

#else  // !HVD_HAVE_CUDA

namespace {
[[noreturn]] void no_cuda() {
  throw InternalError("training/device.cc: a CUDA call in a build without CUDA");
}
}  // namespace

void require_device(const TensorRef& t, const std::string& what) {
  if (t.device().kind == Device::kCPU) return;
  throw InvalidArgumentError(what + " is on " + device_name(t.device()) + ", but " + who() +
                             " runs an hvd built without CUDA (HVD_WITH_CUDA=OFF, or no CUDA "
                             "toolkit was found): pass CPU tensors, or rebuild hvd with CUDA.");
}

void DeviceBuffer::release() noexcept {}
void* DeviceBuffer::get(Device, std::size_t) { no_cuda(); }
void PinnedBuffer::release() noexcept {}
void* PinnedBuffer::get(std::size_t) { no_cuda(); }
void accumulate(Place, DataType, const void*, void*, int64_t) { no_cuda(); }
void cast(Place, DataType, DataType, const void*, void*, int64_t, double) { no_cuda(); }
void copy(Place, const void*, void*, std::size_t) { no_cuda(); }
void zero(Place, void*, std::size_t) { no_cuda(); }
void synchronize(Place) { no_cuda(); }
void OverflowCheck::unscale(const TensorRef&, double) { no_cuda(); }
bool OverflowCheck::overflowed() { return false; }

#endif  // HVD_HAVE_CUDA

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)),
      bytes_(std::exchange(o.bytes_, 0)),
      device_(std::exchange(o.device_, -1)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
    device_ = std::exchange(o.device_, -1);
  }
  return *this;
}

DeviceBuffer::~DeviceBuffer() { release(); }

PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : data_(std::exchange(o.data_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
  if (this != &o) {
    release();
    data_ = std::exchange(o.data_, nullptr);
    bytes_ = std::exchange(o.bytes_, 0);
  }
  return *this;
}

PinnedBuffer::~PinnedBuffer() { release(); }

}  // namespace hvd::training
