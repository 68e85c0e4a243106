#pragma once

// Helper threads for the host fusion buffer's copies (HVD_COPY_THREADS), where a rank has cores
// that nothing else of hvd's runs on.
//
// Packing a batch into the fusion buffer and unpacking it are memory copies of the whole batch,
// made by the thread that runs the op (the background thread, or a one-rank job's user thread).
// For 1000 tensors of 4 KiB on 2 ranks they are about half of the step, and the hand-fused
// MPI_Allreduce that a user would write makes the same copies on one thread. Where the rank may
// run on more cores than its own threads use, run() splits such a copy into slices that the
// calling thread and the helpers take in turn; elsewhere (helpers() == 0, the default where ranks
// share cores, as on a 2-core machine with 2 ranks) it runs every slice on the calling thread and
// nothing changes.
//
// The calling thread never waits for a helper to wake up: it takes slices itself from the same
// counter, so a helper that comes late finds nothing left and goes back to sleep, and the call
// costs at worst what the copy costs alone plus one futex wake (a system call, when a helper
// sleeps). Helpers sleep between calls (no polling: between the pack and the unpack of a batch
// lies its all-reduce, hundreds of microseconds that a spinning helper would take from the rest
// of the machine).
//
// Threading: run() is called by one thread at a time (the ops are the background thread's, or
// used under the runtime's exec_mu_). The helpers are started by the constructor and stopped and
// joined by the destructor.

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "common/function_ref.h"

namespace hvd::ops {

class CopyWorkers {
 public:
  static constexpr int kMaxHelpers = 15;
  static constexpr int kMaxSlices = 0xffff;

  // `helpers` threads (clamped to 0..kMaxHelpers), named hvd-copy.
  explicit CopyWorkers(int helpers);
  ~CopyWorkers();
  CopyWorkers(const CopyWorkers&) = delete;
  CopyWorkers& operator=(const CopyWorkers&) = delete;

  int helpers() const { return static_cast<int>(threads_.size()); }

  // Calls fn(slice) once for each slice in [0, slices) (at most kMaxSlices), on the calling thread
  // and on the helpers, and returns once every call has returned. fn must not throw.
  void run(int slices, FunctionRef<void(int)> fn);

  // Calls made since construction whose slices a helper took part in (for tests).
  int64_t shared_runs() const { return shared_runs_.load(std::memory_order_relaxed); }

 private:
  // The state of the current call in one word, so that taking a slice and checking which call it
  // belongs to are one compare-and-swap: call number (32 bits) | slices (16) | next slice (16).
  static uint64_t ticket(uint32_t call, int slices, int next) {
    return (uint64_t{call} << 32) | (static_cast<uint64_t>(slices) << 16) |
           static_cast<uint64_t>(next);
  }
  // Takes the next slice of call `call` and runs it; false when that call has none left.
  bool take_one(uint32_t call, bool helper);
  void helper_loop();

  std::atomic<uint64_t> ticket_{0};
  std::atomic<int> done_{0};                // slices of the current call that have returned
  std::atomic<bool> helper_joined_{false};  // a helper ran a slice of the current call
  std::atomic<uint32_t> wake_{0};           // futex word: bumped per call and at shutdown
  std::atomic<bool> stop_{false};
  std::atomic<int64_t> shared_runs_{0};
  // The current call's function: written by run() before it publishes the ticket (release), read
  // by a thread only after it took a slice of that call (acquire), and not rewritten before every
  // slice taken has returned.
  FunctionRef<void(int)>* fn_ = nullptr;
  uint32_t call_ = 0;  // run()'s own count
  std::vector<std::thread> threads_;
};

// HVD_COPY_THREADS's value: `configured` when set (>= 0); for -1 (auto), the cores this rank may
// count as its own (MpiTopology::cores_per_rank, cluster/cores.h) beyond `threads_per_rank` of its
// own threads (the user and background threads; a GPU rank's finalizer too), at most 3 (a copy's
// speed-up levels off at a few threads as memory bandwidth runs out).
int copy_helpers(int64_t configured, int cores_per_rank, int threads_per_rank);

}  // namespace hvd::ops
