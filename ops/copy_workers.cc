#include "ops/copy_workers.h"

#include <pthread.h>

#include <algorithm>

#include "common/backoff.h"

namespace hvd::ops {

CopyWorkers::CopyWorkers(int helpers) {
  helpers = std::clamp(helpers, 0, kMaxHelpers);
  threads_.reserve(static_cast<std::size_t>(helpers));
  for (int i = 0; i < helpers; ++i) {
    threads_.emplace_back([this] { helper_loop(); });
    pthread_setname_np(threads_.back().native_handle(), "hvd-copy");
  }
}

CopyWorkers::~CopyWorkers() {
  stop_.store(true, std::memory_order_release);
  wake_.fetch_add(1, std::memory_order_release);
  wake_.notify_all();
  for (auto& t : threads_) t.join();
}

void CopyWorkers::run(int slices, FunctionRef<void(int)> fn) {
  if (slices <= 0) return;
  if (threads_.empty() || slices == 1) {
    for (int s = 0; s < slices; ++s) fn(s);
    return;
  }
  // More slices than one ticket holds: in rounds of kMaxSlices.
  for (int base = 0; base < slices; base += kMaxSlices) {
    const int n = std::min(kMaxSlices, slices - base);
    auto shifted = [&](int s) { fn(base + s); };
    FunctionRef<void(int)> round(shifted);
    fn_ = &round;
    ++call_;
    done_.store(0, std::memory_order_relaxed);
    helper_joined_.store(false, std::memory_order_relaxed);
    ticket_.store(ticket(call_, n, 0), std::memory_order_release);
    wake_.fetch_add(1, std::memory_order_release);
    wake_.notify_all();
    while (take_one(call_, /*helper=*/false)) {}
    // The slices still running are on helpers that are awake: a short spin.
    while (done_.load(std::memory_order_acquire) < n) cpu_pause();
    if (helper_joined_.load(std::memory_order_relaxed))
      shared_runs_.fetch_add(1, std::memory_order_relaxed);
  }
}

bool CopyWorkers::take_one(uint32_t call, bool helper) {
  uint64_t t = ticket_.load(std::memory_order_acquire);
  while (true) {
    if (static_cast<uint32_t>(t >> 32) != call) return false;
    const int slices = static_cast<int>((t >> 16) & 0xffff);
    const int next = static_cast<int>(t & 0xffff);
    if (next >= slices) return false;
    if (ticket_.compare_exchange_weak(t, t + 1, std::memory_order_acq_rel,
                                      std::memory_order_acquire)) {
      (*fn_)(next);
      if (helper) helper_joined_.store(true, std::memory_order_relaxed);
      done_.fetch_add(1, std::memory_order_release);
      return true;
    }
  }
}

void CopyWorkers::helper_loop() {
  // The value before any call or shutdown (0), not a load here: a helper that starts after the
  // destructor's bump must not wait for another.
  uint32_t seen = 0;
  while (true) {
    wake_.wait(seen, std::memory_order_acquire);
    seen = wake_.load(std::memory_order_acquire);
    if (stop_.load(std::memory_order_acquire)) return;
    const auto call = static_cast<uint32_t>(ticket_.load(std::memory_order_acquire) >> 32);
    while (take_one(call, /*helper=*/true)) {}
  }
}

int copy_helpers(int64_t configured, int cores_per_rank, int threads_per_rank) {
  if (configured >= 0)
    return static_cast<int>(std::min<int64_t>(configured, CopyWorkers::kMaxHelpers));
  return std::clamp(cores_per_rank - threads_per_rank, 0, 3);
}

}  // namespace hvd::ops
