#include "ops/cuda/cuda_context.h"

#include <mpi.h>

#include <algorithm>
#include <sstream>

#include "hvd/error.h"

namespace hvd::ops::cuda {
namespace {

int mpi_rank_or_minus_one() {
  int inited = 0, finalized = 0;
  MPI_Initialized(&inited);
  MPI_Finalized(&finalized);
  int rank = -1;
  if (inited && !finalized) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

std::string version_pair(int v) {
  return std::to_string(v / 1000) + "." + std::to_string(v % 1000 / 10);
}

// Device memory is rounded up to 2 MiB steps (at least the request) so that a slowly growing batch
// does not reallocate every time.
std::size_t round_up(std::size_t bytes) {
  constexpr std::size_t kStep = std::size_t{2} << 20;
  return std::max<std::size_t>(kStep, (bytes + kStep - 1) / kStep * kStep);
}

}  // namespace

std::string cuda_version_string() {
  int rt = 0, drv = 0;
  cudaRuntimeGetVersion(&rt);
  cudaDriverGetVersion(&drv);
  return "CUDA runtime " + version_pair(rt) + ", driver " +
         (drv ? version_pair(drv) : std::string("none"));
}

void throw_cuda_error(const char* call, cudaError_t code, const char* file, int line) {
  const char* base = file;
  for (const char* p = file; *p; ++p)
    if (*p == '/') base = p + 1;
  std::ostringstream s;
  s << call << " failed on rank " << mpi_rank_or_minus_one() << ": " << cudaGetErrorName(code)
    << ": " << cudaGetErrorString(code) << " (" << cuda_version_string() << ", " << base << ":"
    << line << ").";
  if (code == cudaErrorNoDevice || code == cudaErrorInvalidDevice ||
      code == cudaErrorInsufficientDriver)
    s << " Check CUDA_VISIBLE_DEVICES and the driver (nvidia-smi), or pass CPU tensors.";
  else if (code == cudaErrorMemoryAllocation)
    s << " The GPU is out of memory: lower HVD_FUSION_THRESHOLD or the batch size.";
  throw CommunicationError(s.str());
}

int visible_device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" status for later calls
    return 0;
  }
  return n;
}

DeviceBuffer::~DeviceBuffer() {
  if (data_) cudaFree(data_);  // synchronous: at shutdown, after the stream drained
}

void* DeviceBuffer::get(std::size_t bytes, cudaStream_t stream) {
  if (bytes <= capacity_ && data_) return data_;
  const std::size_t want = round_up(bytes);
  if (data_) CUDA_CHECK(cudaFreeAsync(data_, stream));
  data_ = nullptr;
  capacity_ = 0;
  CUDA_CHECK(cudaMallocAsync(&data_, want, stream));
  capacity_ = want;
  return data_;
}

PinnedBuffer::~PinnedBuffer() {
  if (data_) cudaFreeHost(data_);
}

void* PinnedBuffer::get(std::size_t bytes, cudaStream_t stream) {
  if (bytes <= capacity_ && data_) return data_;
  const std::size_t want = round_up(bytes);
  if (data_) {
    CUDA_CHECK(cudaStreamSynchronize(stream));
    CUDA_CHECK(cudaFreeHost(data_));
  }
  data_ = nullptr;
  capacity_ = 0;
  CUDA_CHECK(cudaHostAlloc(&data_, want, cudaHostAllocDefault));
  capacity_ = want;
  return data_;
}

EventPool::~EventPool() {
  for (cudaEvent_t e : free_) cudaEventDestroy(e);
}

cudaEvent_t EventPool::acquire() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!free_.empty()) {
      cudaEvent_t e = free_.back();
      free_.pop_back();
      return e;
    }
  }
  cudaEvent_t e = nullptr;
  CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  return e;
}

void EventPool::release(cudaEvent_t event) {
  std::lock_guard<std::mutex> lock(mu_);
  free_.push_back(event);
}

CudaContext::CudaContext(int device) : device_(device) {}

CudaContext::~CudaContext() {
  if (!stream_) return;  // never used: CUDA was never touched
  cudaSetDevice(device_);
  cudaStreamSynchronize(stream_);
  if (ready_event_) cudaEventDestroy(ready_event_);
  cudaStreamDestroy(stream_);
}

void CudaContext::activate() {
  CUDA_CHECK(cudaSetDevice(device_));
  if (stream_) return;
  CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  CUDA_CHECK(cudaEventCreateWithFlags(&ready_event_, cudaEventDisableTiming));
}

void CudaContext::wait_for(void* user_stream) {
  cudaStream_t s = static_cast<cudaStream_t>(user_stream);
  if (s == stream_) return;
  CUDA_CHECK(cudaEventRecord(ready_event_, s));
  CUDA_CHECK(cudaStreamWaitEvent(stream_, ready_event_, 0));
}

void CudaContext::wait_for_all(const std::vector<void*>& user_streams) {
  std::vector<void*> seen;
  for (void* s : user_streams) {
    if (std::find(seen.begin(), seen.end(), s) != seen.end()) continue;
    seen.push_back(s);
    wait_for(s);
  }
}

cudaEvent_t CudaContext::record_completion() {
  cudaEvent_t e = events_.acquire();
  CUDA_CHECK(cudaEventRecord(e, stream_));
  return e;
}

}  // namespace hvd::ops::cuda
