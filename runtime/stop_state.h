#pragma once

// The stop request of this process and the thread's view of the agreement (hvd/stop.h).
//
// `requested` is written by hvd::request_stop(), typically from a signal handler (one lock-free
// atomic store), and read once per negotiation cycle by the background thread (runtime.cc), which
// clears the controller's "no stop" flag while it is set (runtime/controller.h). The executor marks
// every handle of a cycle in or after the one whose AND showed a request
// (HandleState::stop_agreed); Handle::wait() notes a marked handle for the waiting thread
// (note_stop_seen), which hvd::stop_agreed() reads. Process-wide and never destroyed: a signal can
// arrive at any moment, before init() or after shutdown().

#include <atomic>
#include <cstdint>

namespace hvd::detail {

struct StopState {
  // 0: no request; > 0: the signal that asked; kNotASignal: request_stop(0).
  std::atomic<int> requested{0};
  // Bumped by every init(): a thread's note from an earlier runtime does not count.
  std::atomic<uint32_t> generation{1};
  static constexpr int kNotASignal = -1;
  static StopState& get();  // one per process (stop_state.cc)
};
static_assert(std::atomic<int>::is_always_lock_free, "request_stop() must be async-signal-safe");

// The waiting thread saw a handle released after the stop was agreed.
void note_stop_seen();
// Whether this thread has, since the current runtime started.
bool stop_seen_by_this_thread();

}  // namespace hvd::detail
