#include "ops/cuda/finalizer.h"

#include <pthread.h>

#include "common/backoff.h"

namespace hvd::ops::cuda {
namespace {

std::string event_error(cudaError_t rc) {
  return std::string("a GPU operation failed: ") + cudaGetErrorName(rc) + ": " +
         cudaGetErrorString(rc) + " (" + cuda_version_string() +
         "). A kernel on the GPU faulted or the device was lost; see the other ranks' logs.";
}

}  // namespace

Finalizer::Finalizer(CudaContext& ctx, int64_t poll_us) : ctx_(ctx), poll_us_(poll_us) {
  thread_ = std::thread([this] { run(); });
  pthread_setname_np(thread_.native_handle(), "hvd-finalizer");
}

Finalizer::~Finalizer() {
  discard_pending();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    handed_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Finalizer::set_pending(cudaEvent_t event) {
  // An op that set one and then failed before finish(): keep the event's lifecycle.
  discard_pending();
  pending_ = event;
}

void Finalizer::hand_over_pending(Callback on_fired) {
  cudaEvent_t e = pending_;
  pending_ = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back(Item{e, std::move(on_fired)});
    handed_.fetch_add(1, std::memory_order_release);
  }
  cv_.notify_all();
}

void Finalizer::discard_pending() {
  if (pending_ != nullptr) hand_over_pending(nullptr);
}

void Finalizer::finish(Callback done) {
  if (pending_ == nullptr) {
    if (done) done("");
    return;
  }
  hand_over_pending(std::move(done));
}

bool Finalizer::finish_ordered(const std::vector<void*>& streams, const Callback& done,
                               Callback late_error) {
  if (pending_ == nullptr) {
    if (done) done("");
    return true;
  }
  for (void* p : streams) {
    cudaStream_t s = p ? static_cast<cudaStream_t>(p) : cudaStreamLegacy;
    if (s == ctx_.stream()) continue;  // hvd's own stream is in order already
    if (cudaStreamWaitEvent(s, pending_, 0) != cudaSuccess) {
      cudaGetLastError();  // clear it: finish() then waits on the host, as without the option
      return false;
    }
  }
  hand_over_pending(std::move(late_error));
  if (done) done("");
  return true;
}

void Finalizer::run() {
  bool device_set = false;  // set on the first item: an idle finalizer creates no CUDA context
  // The back-off's sleeps last what they ask for (measured on an H200 with the default slack: a
  // 50 us sleep woke ~105 us later, which set every GPU operation longer than the first poll to
  // ~145 us).
  precise_timed_waits();
  // Spin, then yield, then sleep (common/backoff.h), per event: a batch's completion is seen within
  // a microsecond or two while the GPU works on it, and an idle-but-pending wait (a slow network)
  // costs no core for long.
  Backoff backoff(std::chrono::microseconds(20));
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    cv_.wait(lock, [this] { return stop_ || !items_.empty(); });
    if (items_.empty()) return;  // stop_ and drained
    if (!device_set) {
      cudaSetDevice(ctx_.device());
      device_set = true;
    }
    cudaEvent_t e = items_.front().event;
    lock.unlock();
    cudaError_t rc = cudaEventQuery(e);
    if (rc == cudaErrorNotReady) {
      // Polled rather than a blocking cudaEventSynchronize, which could not be interrupted.
      backoff.pause();
      lock.lock();
      continue;
    }
    backoff.reset();
    if (rc != cudaSuccess) cudaGetLastError();
    lock.lock();
    Item item = std::move(items_.front());
    items_.pop_front();
    lock.unlock();
    ctx_.events().release(item.event);
    if (item.done) {
      try {
        item.done(rc == cudaSuccess ? std::string() : event_error(rc));
      } catch (...) {
        // A callback only completes handles; it must not take the finalizer down with it.
      }
    }
    lock.lock();
    if (poll_us_ > 0 && items_.empty() && !stop_) {
      // After a completion the next batch tends to follow (the next step's, or the rest of a
      // burst's): poll for it before sleeping. Only after a completion, so an idle finalizer
      // does not spin.
      const uint64_t seen = handed_.load(std::memory_order_acquire);
      lock.unlock();
      poll_for(poll_us_, [&] { return handed_.load(std::memory_order_acquire) != seen; });
      lock.lock();
    }
  }
}

}  // namespace hvd::ops::cuda
