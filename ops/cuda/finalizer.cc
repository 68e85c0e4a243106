#include "ops/cuda/finalizer.h"

#include <chrono>

namespace hvd::ops::cuda {
namespace {

std::string event_error(cudaError_t rc) {
  return std::string("a GPU operation failed: ") + cudaGetErrorName(rc) + ": " +
         cudaGetErrorString(rc) + " (" + cuda_version_string() +
         "). A kernel on the GPU faulted or the device was lost; see the other ranks' logs.";
}

}  // namespace

Finalizer::Finalizer(CudaContext& ctx) : ctx_(ctx) {
  thread_ = std::thread([this] { run(); });
}

Finalizer::~Finalizer() {
  discard_pending();
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

void Finalizer::set_pending(cudaEvent_t event) {
  discard_pending();  // an op that set one and then failed before finish(): keep the event's lifecycle
  pending_ = event;
}

void Finalizer::discard_pending() {
  if (pending_ == nullptr) return;
  cudaEvent_t e = pending_;
  pending_ = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back(Item{e, nullptr});
  }
  cv_.notify_all();
}

void Finalizer::finish(Callback done) {
  if (pending_ == nullptr) {
    if (done) done("");
    return;
  }
  cudaEvent_t e = pending_;
  pending_ = nullptr;
  {
    std::lock_guard<std::mutex> lock(mu_);
    items_.push_back(Item{e, std::move(done)});
  }
  cv_.notify_all();
}

void Finalizer::run() {
  bool device_set = false;  // set on the first item: an idle finalizer creates no CUDA context
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
      // Polling keeps the latency at tens of microseconds without a spinning core: a blocking
      // cudaEventSynchronize would also work here but could not be interrupted.
      std::this_thread::sleep_for(std::chrono::microseconds(50));
      lock.lock();
      continue;
    }
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
  }
}

}  // namespace hvd::ops::cuda
