#pragma once

// The polling back-off of every busy-wait in hvd (the controller's star exchange, the hierarchical
// ring's MPI_Test loop): spin while an answer is likely to come within microseconds, then yield the
// core, then sleep briefly, because ranks share cores with the trainer's compute threads.
//
//   Backoff backoff;                       // or Backoff(std::chrono::microseconds(20))
//   while (!done()) backoff.pause();
//
// Not thread-safe (one per loop); no MPI, no allocation.

#include <sys/prctl.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <thread>

namespace hvd {

class Backoff {
 public:
  static constexpr int64_t kSpinPolls = 2000;    // polls before the first yield
  static constexpr int64_t kYieldPolls = 20000;  // polls before the first sleep

  explicit Backoff(std::chrono::microseconds sleep = std::chrono::microseconds(50))
      : sleep_(sleep) {}

  // One wait between two polls.
  void pause() {
    ++polls_;
    if (polls_ > kYieldPolls)
      std::this_thread::sleep_for(sleep_);
    else if (polls_ > kSpinPolls)
      std::this_thread::yield();
  }
  // Past the spinning phase: a caller may check its (costlier) deadline on every poll from here.
  bool spinning() const { return polls_ <= kSpinPolls; }
  int64_t polls() const { return polls_; }
  void reset() { polls_ = 0; }

 private:
  std::chrono::microseconds sleep_;
  int64_t polls_ = 0;
};

// For a thread of hvd's that makes short timed waits (the background thread's fusion window and
// cycle, the GPU finalizer's poll sleeps): a 1 us timer slack instead of the kernel's default
// 50 us, by which each such wait could last longer than asked (a 50 us sleep woke ~105 us later).
// Only the calling thread is affected; the user's threads keep theirs.
inline void precise_timed_waits() { prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0); }

// HVD_WAIT_POLL_US's value: `configured` when set (>= 0); for -1 (auto), 50 us where the rank may
// count at least `threads_per_rank` cores as its own (MpiTopology::cores_per_rank,
// cluster/cores.h: each of its polling threads can spin on a core of its own: the user thread and
// the background thread, and on a GPU rank the finalizer's, which asks for three), else 0: where
// ranks share cores, a spinning thread takes the core that the thread it waits for needs
// (measured on 2 cores, 2 ranks: a 4-byte all-reduce 17 -> 124-142 us with a 50 us poll).
inline int64_t wait_poll_us(int64_t configured, int cores_per_rank, int threads_per_rank = 2) {
  if (configured >= 0) return configured;
  return cores_per_rank >= threads_per_rank ? 50 : 0;
}

// One step of a spin-wait: tells the CPU this thread is spinning (x86 PAUSE), so that it yields
// the core's resources to its sibling hyperthread.
inline void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

// Spins until `ready()` or `us` microseconds have passed; returns ready()'s last answer. For a wait
// that is about to block (a condition variable, a futex): where the answer comes within the poll,
// the waiter is not put to sleep and woken again, which costs 10-30 us on a virtual machine. The
// caller decides whether a core may spin at all (HVD_WAIT_POLL_US, runtime/runtime.cc).
template <class Ready>
bool poll_for(int64_t us, Ready&& ready) {
  const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(us);
  while (true) {
    for (int i = 0; i < 64; ++i) {
      if (ready()) return true;
      cpu_pause();
    }
    if (std::chrono::steady_clock::now() >= until) return ready();
  }
}

}  // namespace hvd
