#pragma once

// Completes GPU batches without blocking the background thread. A GPU op enqueues its work on the
// CUDA context's stream, records a completion event and hands it over with set_pending(); the
// runtime, right after OperationManager::execute() returned, attaches what must happen when the
// work is done with finish(). A finalizer thread polls the events in FIFO order (cudaEventQuery,
// spinning, then yielding, then sleeping 20 us between polls: common/backoff.h) and runs each
// callback on that thread, with "" or the CUDA error that the event reported. Events go back to the
// context's pool. Once the queue is empty it polls for the next batch for `poll_us`
// (HVD_WAIT_POLL_US, where cores are spare) before it sleeps on its condition variable: a batch
// handed over meanwhile costs no futex wake-up of this thread (10-30 us on a VM; for an operation
// shorter than that, the wake-up, not the GPU, decides when its handle completes).
//
// Why FIFO polling is enough: every GPU op runs on the one hvd stream per device, so batches
// finish in the order they were queued; the head of the queue is always the next to complete.
//
// Threading: set_pending() and finish() are called by the thread that runs the batch, under the
// runtime's execution lock: the background thread, or a one-rank job's user thread
// (HVD_SINGLE_RANK_INLINE_GPU, runtime/runtime.cc); callbacks run on the finalizer thread and must
// be thread-safe with respect to those (handle completion is). The destructor waits for every
// pending event and runs its callback, so it must run after the background thread stopped and
// before the CudaContext is destroyed.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "ops/cuda/cuda_context.h"

namespace hvd::ops::cuda {

class Finalizer {
 public:
  using Callback = std::function<void(const std::string& error)>;

  // poll_us: how long to poll for the next batch before sleeping (0: never).
  explicit Finalizer(CudaContext& ctx, int64_t poll_us = 0);
  ~Finalizer();
  Finalizer(const Finalizer&) = delete;
  Finalizer& operator=(const Finalizer&) = delete;

  // GPU op, at the end of a successful execute(): the batch's work completes when `event` (from
  // ctx.events(), recorded on ctx.stream()) fires. The finalizer owns the event from here on.
  void set_pending(cudaEvent_t event);
  // Runtime, after OperationManager::execute() returned: runs `done` on the finalizer thread once
  // the pending event fired, or here and now when no op set one (a CPU op, or a GPU op that
  // completed synchronously). Each pending event is consumed by exactly one finish().
  void finish(Callback done);
  // Runtime, with HVD_ENABLE_ASYNC_COMPLETION, after an all-reduce or broadcast whose outputs are
  // all on the device: makes each of `streams` (the outputs' TensorRef streams; null is the legacy
  // default stream) wait for the pending event, then runs done("") here and now, so the handles
  // complete once the work is queued and the host never waits for the GPU. The finalizer still
  // takes the event (back to the pool once it fired) and, if the GPU reports an error by then,
  // logs it: the handles have completed already. Returns false, having done nothing, when a
  // stream could not be made to wait (the caller then uses finish()).
  bool finish_ordered(const std::vector<void*>& streams, const Callback& done, Callback late_error);
  // Runtime, when execute() threw: drops a pending event (returned to the pool when it fires).
  void discard_pending();

 private:
  struct Item {
    cudaEvent_t event;
    Callback done;
  };
  // Queues pending_ (non-null) for the finalizer thread, which runs on_fired once it fired.
  void hand_over_pending(Callback on_fired);
  void run();

  CudaContext& ctx_;
  cudaEvent_t pending_ = nullptr;  // the batch's thread, under the execution lock
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Item> items_;
  bool stop_ = false;
  const int64_t poll_us_;
  std::atomic<uint64_t> handed_{0};  // bumped under mu_ by every hand-over and by the stop
  std::thread thread_;
};

}  // namespace hvd::ops::cuda
