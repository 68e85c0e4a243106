#pragma once

// The shared state behind hvd::Handle. The background thread completes it (complete_one() once per
// tensor of the operation, or fail()); user threads wait on it.

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <cstddef>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "hvd/tensor.h"

namespace hvd::detail {

enum class ErrorKind : uint8_t { kNone, kInvalidArgument, kCommunication, kInternal, kGeneric };

// How user threads wake the background thread (runtime/runtime.cc): a first request since the last
// cycle, shutdown, or a user thread that blocks in Handle::wait() on a request that is still in the
// queue. That thread submits nothing more until its wait returns, so the background thread closes
// the fusion window at once instead of waiting it out (measured: the step of 1000 cached 4 KiB
// tensors on 2 ranks negotiated ~130 us after its last request, docs/benchmarks.md). One per
// runtime (runtime/services.h), shared with the queues of its process sets and with every handle
// they take: a Handle may outlive its Runtime (a wait on it after hvd::shutdown(), or
// during it on another thread, still finds the signal), and hvd::init() after hvd::shutdown()
// builds a new runtime with a signal of its own.
struct WakeSignal {
  std::mutex mu;  // with cv: the background thread's sleep between cycles
  std::condition_variable cv;
  // Calls of TensorQueue::pop_requests() that took requests (and closes that dropped some), of
  // the runtime's queues: every request in a queue is taken by pop number pops + 1. (The sets'
  // queues share the count: a pop of one set's queue only makes another's waiter lose the early
  // close.)
  std::atomic<uint64_t> pops{0};
  // The highest pop number that a user thread blocked in wait() needs: when it is above `pops`,
  // a waiter's requests are in the queue now, and the window closes. Never cleared: the pop makes
  // it stale by itself, so a waiter whose requests were taken meanwhile closes no later window.
  std::atomic<uint64_t> waited_for{0};
  // Cycles the background thread has started (Runtime::loop).
  std::atomic<uint64_t> cycles{0};
  // A user thread blocked on an operation whose requests a pop took already (the controller holds
  // them until the other ranks have theirs) wants the next cycle to start at once, not one
  // HVD_CYCLE_TIME after the last (Runtime::loop): the number of the first cycle that may start
  // after it asked. Never cleared: starting that cycle makes it stale.
  std::atomic<uint64_t> wanted_cycle{0};
  // A user thread waiting for the measure of a release (hvd::straggler_report(), which comes with
  // the next cycle) wants that cycle at once, whatever this rank holds: the number of the first
  // cycle that may start after it asked. Never cleared: starting that cycle makes it stale.
  std::atomic<uint64_t> report_cycle{0};
  // notify() calls so far: the background thread polls it for a while before it sleeps.
  std::atomic<uint64_t> notified{0};
  // How long a blocking wait polls before it sleeps, in microseconds (Handle::wait(), the
  // background thread between cycles): 0 = sleep at once. Set by the runtime (HVD_WAIT_POLL_US).
  std::atomic<int64_t> poll_us{0};

  void notify();  // wakes the background thread (locks mu first: no wake-up can be missed)
  // A user thread is about to block on an operation whose requests pop number `popped_by` takes
  // (or took: then it wants the next cycle).
  void waiting_for(uint64_t popped_by);
  // hvd::straggler_report() waits for the next cycle: raises report_cycle and wakes the thread.
  void want_report_cycle();
  // The background thread, between two pops: does a blocked user thread wait for queued requests?
  bool waited() const {
    return waited_for.load(std::memory_order_acquire) > pops.load(std::memory_order_relaxed);
  }
  // The background thread: does a user thread in hvd::straggler_report() want the next cycle now?
  bool report_wanted() const {
    return report_cycle.load(std::memory_order_acquire) > cycles.load(std::memory_order_relaxed);
  }
  // The background thread: does a blocked user thread want the next cycle now?
  bool cycle_wanted() const {
    return wanted_cycle.load(std::memory_order_acquire) > cycles.load(std::memory_order_relaxed);
  }
};

struct HandleState {
  explicit HandleState(int pending_tensors) : pending(pending_tensors) {}

  // One tensor of the operation finished (successfully).
  void complete_one();
  // The operation will complete `n` more tensors than it expected (a group unit split into its
  // members or into several batches, runtime/group_unit.h); before any of them completes.
  void expect_more(int n);
  // The operation failed: every waiter throws this message. The first failure wins.
  void fail(ErrorKind kind, const std::string& message);
  void set_join_result(int rank) { join_result = rank; }  // before complete_one()

  // Complete (successfully or not): everything the background thread wrote before is visible.
  bool done() const { return (phase.load(std::memory_order_acquire) & kPhase) == kDone; }
  // Blocks until done() (a futex wait on `phase`; no wake-up unless a thread waits).
  void wait_done() const;

  // Completion without a lock or a condition variable: the tensor that takes `pending` to 0 (or the
  // first fail()) moves `phase` from kRunning to kFinishing, writes the outcome, then stores kDone
  // (release) and wakes the waiters, if any. A handle's life on the hot path (one tensor, one wait)
  // thus costs two atomic operations and no mutex (docs/benchmarks.md, "Shapes inside the
  // `TensorRef`, handles without a lock").
  //
  // kWaiter: a thread blocks (or is about to) on this handle; only then does publish() wake
  // anyone. std::atomic::notify_all() alone cannot tell: libstdc++ counts waiters per bucket of a
  // 16-entry table hashed by address, so while a user thread waited on one handle, completing any
  // other handle of that bucket made a futex system call (the pool's 528-byte strides put a
  // quarter of all handles there: 250 system calls a step at 1000 tensors; docs/benchmarks.md).
  static constexpr int kRunning = 0, kFinishing = 1, kDone = 2, kPhase = 3, kWaiter = 4;
  mutable std::atomic<int> phase{kRunning};
  std::atomic<int> pending;
  // Written once, before `phase` becomes kDone (join_result by the executor, the results by the
  // op or fail()); read after done(), whose acquire load makes them visible: no lock.
  ErrorKind error_kind = ErrorKind::kNone;
  // Released in or after the cycle in which the ranks learnt of a stop request (hvd/stop.h):
  // written by the executor before completion, the same on every rank for the same operation.
  bool stop_agreed = false;
  int join_result = -1;
  // The WakeSignal::pops number that takes this operation's requests (0: none travel through the
  // queue's requests), and that signal, which Handle::wait() raises and polls for its poll_us
  // (null: wait() only waits; an operation run inline is done before its handle is returned).
  // Set together by the queue (TensorQueue), before the handle reaches the user. Shared, not a
  // reference: the handle may outlive the runtime; and set only for what goes through the queue,
  // so that a one-rank job's inline operations pay no count for it.
  uint64_t popped_by = 0;
  std::shared_ptr<WakeSignal> wake;

  // What only some operations leave: a failure's message, the result of an allgather, alltoall or
  // reducescatter, alltoall's received splits. Made on first use, so that the state of an
  // allreduce (a trainer's thousand per step) is 48 bytes: with the shared_ptr's control block it
  // fills one cache line of the pool (make_handle_state), where the three lines of a state with
  // these inline were each touched when a state was made, completed, waited on and dropped.
  struct Results {
    std::string error;
    Tensor output;                         // allgather / alltoall / reducescatter result
    std::vector<int64_t> received_splits;  // alltoall
  };
  // Made on the first call, from any thread (the first of two racing calls wins; the other's is
  // freed): the op, fail() or the user's Handle::output(), which comes after the wait.
  Results& results() const;
  // Without making them: null when no one asked for them.
  const Results* results_if_any() const { return results_.load(std::memory_order_acquire); }

  HandleState(const HandleState&) = delete;
  HandleState& operator=(const HandleState&) = delete;
  ~HandleState() { delete results_.load(std::memory_order_relaxed); }

 private:
  bool claim();    // kRunning -> kFinishing: this thread writes the outcome
  void publish();  // -> kDone, and wake the waiters
  mutable std::atomic<Results*> results_{nullptr};
};

// A new HandleState, its memory (with the shared_ptr's control block) taken from a process-wide
// pool of recycled 64-byte blocks, one cache line each. A step submits its tensors in a burst and
// drops their handles in the next: 1000 blocks each way overflow malloc's per-thread cache (7
// blocks per size) into its locked arena path, which cost more instructions than the rest of a
// handle's life (docs/benchmarks.md, "Instructions per tensor"). Each thread takes and gives blocks
// of its own without a lock (up to 128), trading them 64 at a time with a shared list. The first
// 8192 blocks are carved side by side from one region (512 KiB), which the list keeps; it keeps
// others while it holds fewer than 8192 blocks. Under AddressSanitizer the pool is bypassed, so
// that a use after free is still caught.
std::shared_ptr<HandleState> make_handle_state(int pending_tensors);
// Whether make_handle_state() uses the pool (not under AddressSanitizer), and the blocks it holds
// now: the shared list's and the calling thread's own (tests).
bool handle_pool_enabled();
std::size_t handle_pool_size();

// Maps an exception caught on the background thread to (kind, message).
std::pair<ErrorKind, std::string> classify(const std::exception& e);
[[noreturn]] void throw_error(ErrorKind kind, const std::string& message);

}  // namespace hvd::detail
